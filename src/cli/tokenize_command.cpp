// `latentserve tokenize`: text -> ids with the checkpoint's tokenizer.json, or ids -> text.
//   latentserve tokenize --model DIR --text "Hello"      -> {"ids":[...]}
//   latentserve tokenize --model DIR --decode 1,2,3      -> the decoded text
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::cli {

namespace {
struct TokenizeArgs {
  std::string model_dir;
  std::string text;
  std::string decode;
  bool no_special = false;
  bool skip_special = false;
};

int run_tokenize(const TokenizeArgs& a) {
  const bool has_text = !a.text.empty() || a.decode.empty();
  if (!a.decode.empty() && !a.text.empty()) fail("tokenize: give --text or --decode, not both");
  const auto tok = tokenizer::Tokenizer::from_file(a.model_dir + "/tokenizer.json");
  std::string out;
  if (has_text) {
    const auto ids = tok.encode(a.text, !a.no_special);
    out = "{\"ids\":[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
    out += "]}\n";
  } else {
    const auto ids = parse_token_list(a.decode, "--decode");
    out = tok.decode(ids, a.skip_special) + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "encode text to ids (JSON) or decode ids to text with tokenizer.json");
  cmd->add_option("--model", args->model_dir, "checkpoint folder holding tokenizer.json")->required();
  cmd->add_option("--text", args->text, "text to encode; prints {\"ids\":[...]}");
  cmd->add_option("--decode", args->decode, "comma-separated ids to decode; prints the text");
  cmd->add_flag("--no-special-tokens", args->no_special, "do not add the post-processor's special tokens (BOS...)");
  cmd->add_flag("--skip-special-tokens", args->skip_special, "leave special tokens out of decoded text");
  return {cmd, [args] { return run_tokenize(*args); }};
}

}  // namespace latentserve::cli
