#pragma once
// The chat template of a checkpoint's tokenizer_config.json ("chat_template": a string, or a
// list of {name, template} where "default" is used), rendered with messages, bos_token,
// eos_token and add_generation_prompt by the Jinja subset of jinja.h.
#include <nlohmann/json.hpp>

#include <string>

#include "tokenizer/jinja.h"

namespace latentserve::tokenizer {

class ChatTemplate {
 public:
  // An Error names the file when it has no chat_template.
  static ChatTemplate from_config_file(const std::string& tokenizer_config_path);
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token);

  // messages: [{"role": ..., "content": ...}, ...]; `extra` adds variables (tools, enable_thinking...).
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  JinjaTemplate template_;
  std::string bos_, eos_;
};

}  // namespace latentserve::tokenizer
