#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {

// "post_processor": TemplateProcessing (single sequences), ByteLevel (ids unchanged), Sequence.
class PostProcessor {
 public:
  PostProcessor(const nlohmann::json& config, const std::string& file) { add(config, file); }
  void apply(std::vector<int32_t>& ids) const {
    if (!has_template_) return;
    std::vector<int32_t> out;
    out.reserve(ids.size() + template_ids_.size());
    for (const auto& piece : template_ids_) {
      if (piece.empty()) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), piece.begin(), piece.end());
    }
    ids = std::move(out);
  }

 private:
  void add(const nlohmann::json& config, const std::string& file) {
    const std::string type = component_type(config, "post_processor", file);
    if (type == "ByteLevel") return;  // changes offsets only
    if (type == "Sequence") {
      for (const auto& c : config.at("processors")) add(c, file);
      return;
    }
    if (type == "TemplateProcessing") {
      if (has_template_) fail("{}: two TemplateProcessing post-processors are not supported", file);
      has_template_ = true;
      for (const auto& item : config.at("single")) {
        if (item.contains("Sequence")) {
          template_ids_.emplace_back();  // empty = the sequence itself
        } else if (item.contains("SpecialToken")) {
          const std::string id = item["SpecialToken"].at("id").get<std::string>();
          const auto& special = config.at("special_tokens");
          if (!special.contains(id)) fail("{}: TemplateProcessing uses special token '{}' that it does not define", file, id);
          template_ids_.push_back(special[id].at("ids").get<std::vector<int32_t>>());
          if (template_ids_.back().empty()) template_ids_.pop_back();
        } else {
          fail("{}: TemplateProcessing item {} is neither Sequence nor SpecialToken", file, item.dump());
        }
      }
      return;
    }
    fail("{}: post_processor type '{}' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)", file,
         type);
  }

  bool has_template_ = false;
  std::vector<std::vector<int32_t>> template_ids_;
};

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the tokenizer file", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  return from_json(config, path);
}

Tokenizer Tokenizer::from_json(const nlohmann::json& config, const std::string& name) {
  Tokenizer t;
  t.name_ = name;
  try {
    if (!config.is_object() || !config.contains("model")) fail("{}: no \"model\" object", name);
    const auto& model = config["model"];
    const std::string model_type = model.value("type", std::string("BPE"));
    if (model_type != "BPE")
      fail("{}: model type '{}' is not supported (supported: BPE)", name, model_type);
    t.model_ = std::make_unique<BpeModel>(model, name);
    t.normalizer_ = make_normalizer(config.value("normalizer", nlohmann::json()), name);
    t.pre_tokenizer_ = make_pre_tokenizer(config.value("pre_tokenizer", nlohmann::json()), name);
    t.decoder_ = make_decoder(config.value("decoder", nlohmann::json()), name);
    const auto post = config.value("post_processor", nlohmann::json());
    if (!post.is_null()) t.post_processor_ = std::make_unique<PostProcessor>(post, name);
    if (config.contains("truncation") && !config["truncation"].is_null())
      fail("{}: truncation is set; latentserve does not truncate", name);
    if (config.contains("padding") && !config["padding"].is_null())
      fail("{}: padding is set; latentserve does not pad", name);

    for (const auto& a : config.value("added_tokens", nlohmann::json::array())) {
      AddedToken token;
      token.content = a.at("content").get<std::string>();
      token.id = a.at("id").get<int32_t>();
      token.special = a.value("special", false);
      token.lstrip = a.value("lstrip", false);
      token.rstrip = a.value("rstrip", false);
      token.normalized = a.value("normalized", !token.special);
      token.single_word = a.value("single_word", false);
      if (token.id < 0) fail("{}: added token '{}' has negative id", name, token.content);
      t.added_.push_back(std::move(token));
    }
    std::vector<std::string> raw_patterns, normalized_patterns;
    std::vector<bool> raw_include, normalized_include;
    int32_t max_id = t.model_->max_id();
    for (const AddedToken& a : t.added_) {
      raw_patterns.push_back(a.content);
      raw_include.push_back(!a.normalized);
      normalized_patterns.push_back(a.normalized && t.normalizer_ ? t.normalizer_->normalize(a.content) : a.content);
      normalized_include.push_back(a.normalized);
      max_id = std::max(max_id, a.id);
    }
    t.raw_matcher_.build(t.added_, raw_patterns, raw_include);
    t.normalized_matcher_.build(t.added_, normalized_patterns, normalized_include);
    t.added_index_by_id_.assign(static_cast<size_t>(max_id + 1), -1);
    for (size_t i = 0; i < t.added_.size(); ++i) t.added_index_by_id_[static_cast<size_t>(t.added_[i].id)] = static_cast<int32_t>(i);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed tokenizer.json: {}", name, e.what());
  }
  return t;
}

void Tokenizer::encode_segment(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const {
  PreTokenized pre;
  pre.pieces.push_back({std::string(text), at_input_start});
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pre);
  for (const PreToken& piece : pre.pieces) model_->tokenize(piece.text, pre.byte_level, ids);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  const std::string text = utf8_lossy(input);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSplit> raw, normalized;
  raw_matcher_.split(text, raw);
  for (const TextSplit& s : raw) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
      continue;
    }
    std::string piece = text.substr(s.begin, s.end - s.begin);
    if (normalizer_) piece = normalizer_->normalize(std::move(piece));
    normalized.clear();
    normalized_matcher_.split(piece, normalized);
    for (const TextSplit& n : normalized) {
      if (n.token_id >= 0) ids.push_back(n.token_id);
      else encode_segment(std::string_view(piece).substr(n.begin, n.end - n.begin), s.begin == 0 && n.begin == 0, ids);
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const int32_t added = id >= 0 && static_cast<size_t>(id) < added_index_by_id_.size()
                              ? added_index_by_id_[static_cast<size_t>(id)] : -1;
    if (added >= 0) {
      const AddedToken& a = added_[static_cast<size_t>(added)];
      if (skip_special_tokens && a.special) continue;
      tokens.push_back(a.content);
      continue;
    }
    const std::string* token = model_->id_to_token(id);
    if (!token) fail("{}: token id {} is not in the vocabulary (size {})", name_, id, vocab_size());
    tokens.push_back(*token);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  const int32_t id = model_->token_to_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id >= 0 && static_cast<size_t>(id) < added_index_by_id_.size() && added_index_by_id_[static_cast<size_t>(id)] >= 0)
    return added_[static_cast<size_t>(added_index_by_id_[static_cast<size_t>(id)])].content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= added_index_by_id_.size()) return false;
  const int32_t i = added_index_by_id_[static_cast<size_t>(id)];
  return i >= 0 && added_[static_cast<size_t>(i)].special;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(added_index_by_id_.size()); }

bool Tokenizer::decoder_prefix_stable() const { return !decoder_ || decoder_->prefix_stable(); }

}  // namespace latentserve::tokenizer
