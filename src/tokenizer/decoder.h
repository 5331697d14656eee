#pragma once
// tokenizer.json "decoder": ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
// Sequence. Any other type is an Error naming it. A decoder maps the token strings of a
// sequence to output strings (Hugging Face's decode_chain); the results are concatenated.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace latentserve::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // False when the text of a prefix of the ids can change once more ids arrive other than
  // in its trailing incomplete character (Strip of trailing characters).
  virtual bool prefix_stable() const { return true; }
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& file);

}  // namespace latentserve::tokenizer
