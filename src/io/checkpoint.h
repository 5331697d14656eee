#pragma once
// Checkpoint: the weights of a Hugging Face model folder, by tensor name, across
// however many safetensors files hold them. Which files, in this order:
//   1. model.safetensors                  (one file)
//   2. model.safetensors.index.json       (shards named by its "weight_map")
//   3. every *.safetensors in the folder  (no index: each name must occur once)
// All files stay mapped for the Checkpoint's lifetime; tensor() hands out
// zero-copy views into them (read-only memory).
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor_view.h"
#include "io/safetensors.h"

namespace latentserve {

class Checkpoint {
 public:
  // Throws Error naming the folder (and the file / tensor involved) when the folder
  // has no safetensors, when the index is malformed or disagrees with the shards,
  // when a tensor appears in two files, or when any file fails validation.
  static Checkpoint open(const std::filesystem::path& model_dir);

  bool has(const std::string& name) const;
  TensorView tensor(const std::string& name) const;  // missing -> Error naming the tensor and folder
  std::vector<std::string> tensor_names() const;     // sorted
  std::filesystem::path file_of(const std::string& name) const;  // missing -> Error
  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct Location {
    size_t file_index;
    TensorView view;
  };
  const Location& locate(const std::string& name) const;
  void add_file(SafetensorsFile file);  // indexes its tensors; a repeated name is an error

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, Location> tensors_;
};

}  // namespace latentserve
