#pragma once
// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Prepend,
// Replace (String or Regex), Sequence. Any other type is an Error naming it.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace latentserve::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// `config` is the "normalizer" object; null -> nullptr. `file` names tokenizer.json in errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config, const std::string& file);

}  // namespace latentserve::tokenizer
