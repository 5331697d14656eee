#pragma once
// The BPE model of tokenizer.json: vocab, merges ("a b" strings or [a, b] pairs) with their
// ranks, unk/fuse_unk, byte_fallback (<0xXX> tokens), continuing_subword_prefix,
// end_of_word_suffix, ignore_merges. Merging runs lowest rank first (leftmost on ties) over a
// linked list of symbols with a binary heap; results for repeated words are cached.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latentserve::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  BpeModel(const nlohmann::json& model, const std::string& file);

  // Appends the ids of one pre-token. byte_level: the word is raw bytes to be read through
  // the GPT-2 byte alphabet.
  void tokenize(std::string_view word, bool byte_level, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const;        // -1 when absent
  const std::string* id_to_token(int32_t id) const;          // nullptr when absent
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct MergeEntry {
    uint64_t key;
    int32_t rank;
    int32_t new_id;
  };
  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const;
  void add_char_symbols(std::string_view symbol, size_t byte_len, std::vector<int32_t>& ids,
                        int32_t& pending_unk) const;

  VocabMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<MergeEntry> merge_table_;  // open addressing, key 0 = empty slot
  uint64_t merge_mask_ = 0;
  std::array<int32_t, 256> byte_symbol_id_{};  // byte -> id of its byte-level char, or -1
  std::array<int32_t, 256> byte_fallback_id_{};  // byte -> id of <0xXX>, or -1
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace latentserve::tokenizer
