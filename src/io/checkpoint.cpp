#include "io/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"

namespace latentserve {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFileName = "model.safetensors";
constexpr const char* kIndexFileName = "model.safetensors.index.json";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows symlinks (the Hugging Face cache uses them)
}

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

// weight_map of an index file: tensor name -> shard file name (a plain name in the folder).
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const nlohmann::json index = read_json_file(index_path);
  const std::string file = index_path.string();
  if (!index.is_object()) fail("{}: expected a JSON object, found {}", file, index.type_name());
  if (!index.contains("weight_map")) fail("{}: no \"weight_map\"", file);
  const nlohmann::json& weight_map = index["weight_map"];
  if (!weight_map.is_object())
    fail("{}: \"weight_map\" must be an object of tensor name -> file name, found {}", file, weight_map.type_name());
  if (weight_map.empty()) fail("{}: \"weight_map\" is empty", file);
  std::map<std::string, std::string> result;
  for (const auto& [name, shard] : weight_map.items()) {
    if (!shard.is_string())
      fail("{}: weight_map entry for tensor '{}' must be a file name string, found {}", file, name, shard.dump());
    const std::string shard_name = shard.get<std::string>();
    // Shards live in the folder itself: refuse paths that would reach outside it.
    if (shard_name.empty() || shard_name == "." || shard_name == ".." || shard_name.find('/') != std::string::npos)
      fail("{}: weight_map maps tensor '{}' to '{}', expected a file name in the model folder", file, name,
           shard_name);
    result.emplace(name, shard_name);
  }
  return result;
}

}  // namespace

void Checkpoint::add_file(SafetensorsFile file) {
  const size_t file_index = files_.size();
  for (const auto& t : file.tensors()) {
    auto [it, inserted] = tensors_.emplace(t.name, Location{file_index, t.view});
    if (!inserted)
      fail("{}: tensor '{}' is in two files: {} and {}", dir_.string(), t.name,
           files_[it->second.file_index]->path().filename().string(), file.path().filename().string());
  }
  files_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
}

Checkpoint Checkpoint::open(const fs::path& model_dir) {
  std::error_code ec;
  if (!fs::exists(model_dir, ec)) fail("model folder '{}' does not exist", model_dir.string());
  if (!fs::is_directory(model_dir, ec)) fail("model folder '{}' is not a directory", model_dir.string());

  Checkpoint ckpt;
  ckpt.dir_ = model_dir;

  if (is_file(model_dir / kSingleFileName)) {
    ckpt.add_file(SafetensorsFile::open(model_dir / kSingleFileName));
    return ckpt;
  }

  const fs::path index_path = model_dir / kIndexFileName;
  if (is_file(index_path)) {
    const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
    // Each shard once, in name order; the first tensor naming it helps the message.
    std::map<std::string, std::string> shards;  // shard -> a tensor mapped to it
    for (const auto& [name, shard] : weight_map) shards.emplace(shard, name);
    for (const auto& [shard, some_tensor] : shards) {
      if (!is_file(model_dir / shard))
        fail("{}: weight_map maps tensor '{}' to '{}', which is not a file in {}", index_path.string(), some_tensor,
             shard, model_dir.string());
      ckpt.add_file(SafetensorsFile::open(model_dir / shard));
    }
    for (const auto& [name, shard] : weight_map) {
      auto it = ckpt.tensors_.find(name);
      if (it == ckpt.tensors_.end())
        fail("{}: weight_map maps tensor '{}' to '{}', which does not hold it", index_path.string(), name, shard);
      const fs::path actual = ckpt.files_[it->second.file_index]->path().filename();
      if (actual != shard)
        fail("{}: weight_map maps tensor '{}' to '{}', but it is in '{}'", index_path.string(), name, shard,
             actual.string());
    }
    // Tensors a shard holds beyond its weight_map entries stay readable: the index
    // only says where to look, and no name may be in two files (checked above).
    return ckpt;
  }

  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(model_dir, ec))
    if (entry.path().extension() == ".safetensors" && is_file(entry.path())) found.push_back(entry.path());
  if (ec) fail("model folder '{}' cannot be listed: {}", model_dir.string(), ec.message());
  if (found.empty())
    fail("model folder '{}' holds no safetensors weights: expected {}, {} with its shards, or *.safetensors files",
         model_dir.string(), kSingleFileName, kIndexFileName);
  std::sort(found.begin(), found.end());
  for (const auto& path : found) ckpt.add_file(SafetensorsFile::open(path));
  return ckpt;
}

const Checkpoint::Location& Checkpoint::locate(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail("model folder '{}' has no tensor named '{}' ({} tensors in {} file(s))", dir_.string(), name,
         tensors_.size(), files_.size());
  return it->second;
}

bool Checkpoint::has(const std::string& name) const { return tensors_.count(name) != 0; }

TensorView Checkpoint::tensor(const std::string& name) const { return locate(name).view; }

fs::path Checkpoint::file_of(const std::string& name) const { return files_[locate(name).file_index]->path(); }

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, location] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace latentserve
