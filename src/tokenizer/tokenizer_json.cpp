#include "tokenizer/tokenizer_json.h"

#include "core/error.h"

namespace latentserve::tokenizer {

std::string component_type(const nlohmann::json& config, const char* kind, const std::string& file) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    fail("{}: {} has no \"type\" field (found {})", file, kind, config.dump().substr(0, 200));
  return config["type"].get<std::string>();
}

Pattern pattern_from_json(const nlohmann::json& config, const std::string& what) {
  if (config.contains("String")) {
    std::string literal = config["String"].get<std::string>();
    if (literal.empty()) fail("{}: empty String pattern", what);
    return Pattern(std::move(literal), nullptr);
  }
  if (config.contains("Regex")) return Pattern({}, std::make_unique<Regex>(config["Regex"].get<std::string>(), what));
  fail("{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, found {}", what, config.dump());
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  for (size_t pos = text.find(literal_); pos != std::string_view::npos; pos = text.find(literal_, pos)) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (auto [b, e] : matches) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace latentserve::tokenizer
