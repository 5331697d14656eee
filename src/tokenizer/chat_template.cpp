#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace latentserve::tokenizer {

namespace {
std::string token_text(const nlohmann::ordered_json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return {};
  const auto& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t["content"].get<std::string>();
  fail("tokenizer_config.json: {} must be a string or an AddedToken object, found {}", key, t.dump());
}
}  // namespace

ChatTemplate ChatTemplate::from_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the tokenizer config", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) fail("{}: has no chat_template", path);
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const auto& t : *it)
      if (t.value("name", std::string()) == "default") source = t.at("template").get<std::string>();
    if (source.empty()) fail("{}: chat_template is a list without a \"default\" entry", path);
  } else {
    fail("{}: chat_template must be a string or a list of {{name, template}}", path);
  }
  return with_context(path, [&] { return ChatTemplate(source, token_text(config, "bos_token"), token_text(config, "eos_token")); });
}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token)
    : template_(source), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_;
  context["eos_token"] = eos_;
  for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  return template_.render(context);
}

}  // namespace latentserve::tokenizer
