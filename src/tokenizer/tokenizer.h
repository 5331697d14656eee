#pragma once
// A Hugging Face tokenizer.json: text -> ids (normalizer, added tokens, pre-tokenizer, BPE
// model, post-processor) and ids -> text (decoder), with the ids HF tokenizers produces.
//
// Input text is bytes. Invalid UTF-8 is first repaired as Rust's String::from_utf8_lossy
// does (one U+FFFD per maximal invalid subpart), which is what a caller of the HF library
// gets from any lossy bytes -> str conversion. Unknown ids in decode() are an Error (HF
// drops them silently).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace latentserve::tokenizer {

class Normalizer;
class PreTokenizer;
class BpeModel;
class Decoder;
class PostProcessor;

class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& path);
  // `name` is used in error messages (usually the path of tokenizer.json).
  static Tokenizer from_json(const nlohmann::json& config, const std::string& name);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  int32_t vocab_size() const;  // largest id + 1, added tokens included
  bool decoder_prefix_stable() const;

 private:
  Tokenizer();
  void encode_segment(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const;

  std::string name_;
  std::vector<AddedToken> added_;
  std::vector<int32_t> added_index_by_id_;  // id -> index in added_, or -1
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
};

}  // namespace latentserve::tokenizer
