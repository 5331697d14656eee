#pragma once
// Small pieces shared by the tokenizer.json component readers.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/regex.h"

namespace latentserve::tokenizer {

// config["type"] as a string; an Error naming `kind` and `file` when absent.
std::string component_type(const nlohmann::json& config, const char* kind, const std::string& file);

// {"String": "..."} or {"Regex": "..."}: a literal or a PCRE2 pattern.
class Pattern {
 public:
  Pattern(std::string literal, std::unique_ptr<Regex> regex) : literal_(std::move(literal)), regex_(std::move(regex)) {}
  // Non-overlapping matches (begin, end), left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;           // used when regex_ is null
  std::unique_ptr<Regex> regex_;
};

Pattern pattern_from_json(const nlohmann::json& config, const std::string& what);

}  // namespace latentserve::tokenizer
