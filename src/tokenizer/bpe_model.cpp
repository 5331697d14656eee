#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {

namespace {
constexpr size_t kCacheCapacity = 1 << 17;
constexpr size_t kCacheMaxWordBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  // +1 keeps key 0 free as the empty-slot marker.
  return ((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right)) + 1;
}
uint64_t hash_key(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) ^ (key >> 29); }

std::string optional_string(const nlohmann::json& model, const char* field) {
  if (!model.contains(field) || model[field].is_null()) return {};
  return model[field].get<std::string>();
}
}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& file) {
  if (model.value("dropout", nlohmann::json()).is_number() && model["dropout"].get<double>() != 0.0)
    fail("{}: BPE dropout is not supported (found {})", file, model["dropout"].dump());
  const auto& vocab = model.at("vocab");
  if (!vocab.is_object()) fail("{}: model.vocab must be an object of token -> id", file);
  vocab_.reserve(vocab.size() * 2);
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > (1 << 30)) fail("{}: vocab id {} of token '{}' is out of range", file, id, it.key());
    vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = token;

  continuing_subword_prefix_ = optional_string(model, "continuing_subword_prefix");
  end_of_word_suffix_ = optional_string(model, "end_of_word_suffix");
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    unk_id_ = token_to_id(unk);
    if (unk_id_ < 0) fail("{}: unk_token '{}' is not in the vocab", file, unk);
  }

  // Merges: "a b" or ["a", "b"]; rank = position in the list.
  const auto& merges = model.at("merges");
  size_t capacity = 16;
  while (capacity < merges.size() * 2 + 16) capacity <<= 1;
  merge_table_.assign(capacity, MergeEntry{0, 0, 0});
  merge_mask_ = capacity - 1;
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) fail("{}: merge #{} '{}' is not of the form 'a b'", file, rank, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail("{}: merge #{} must be a string 'a b' or a pair [a, b], found {}", file, rank, m.dump());
    }
    const int32_t l = token_to_id(left), r = token_to_id(right);
    if (l < 0 || r < 0) fail("{}: merge #{} '{} {}' uses a token that is not in the vocab", file, rank, left, right);
    std::string merged = left;
    if (!continuing_subword_prefix_.empty() && right.rfind(continuing_subword_prefix_, 0) == 0)
      merged += right.substr(continuing_subword_prefix_.size());
    else
      merged += right;
    const int32_t id = token_to_id(merged);
    if (id < 0) fail("{}: merge #{} '{} {}' makes '{}', which is not in the vocab", file, rank, left, right, merged);
    const uint64_t key = pair_key(l, r);
    for (uint64_t slot = hash_key(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
      if (merge_table_[slot].key == 0) {
        merge_table_[slot] = {key, rank, id};
        break;
      }
      if (merge_table_[slot].key == key) break;  // a duplicate merge keeps its first rank
    }
    ++rank;
  }

  const auto& alphabet = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, alphabet[b]);
    byte_symbol_id_[b] = token_to_id(ch);
    byte_fallback_id_[b] = token_to_id(fmt::format("<0x{:02X}>", b));
  }
  cache_.reserve(1024);
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& t = id_to_token_[static_cast<size_t>(id)];
  if (t.empty() && token_to_id(t) != id) return nullptr;
  return &t;
}

const BpeModel::MergeEntry* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t slot = hash_key(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeEntry& e = merge_table_[slot];
    if (e.key == key) return &e;
    if (e.key == 0) return nullptr;
  }
}

void BpeModel::tokenize(std::string_view word, bool byte_level, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    int32_t id;
    if (byte_level) {
      std::string mapped;
      mapped.reserve(word.size() * 2);
      for (unsigned char b : word) utf8_append(mapped, byte_to_unicode()[b]);
      id = token_to_id(mapped);
    } else {
      id = token_to_id(word);
    }
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(word, byte_level, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
  }
}

// One character (with prefix/suffix applied) -> its symbol ids, or byte fallback, or unk.
void BpeModel::add_char_symbols(std::string_view symbol, size_t byte_len, std::vector<int32_t>& ids,
                                int32_t& pending_unk) const {
  (void)byte_len;
  const int32_t id = token_to_id(symbol);
  if (id >= 0) {
    if (pending_unk >= 0) ids.push_back(pending_unk), pending_unk = -1;
    ids.push_back(id);
    return;
  }
  if (byte_fallback_) {
    bool all = true;
    for (unsigned char b : symbol) all &= byte_fallback_id_[b] >= 0;
    if (all) {
      if (pending_unk >= 0) ids.push_back(pending_unk), pending_unk = -1;
      for (unsigned char b : symbol) ids.push_back(byte_fallback_id_[b]);
      return;
    }
  }
  if (unk_id_ >= 0) {
    if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
    pending_unk = unk_id_;
  }
}

void BpeModel::merge_word(std::string_view word, bool byte_level, std::vector<int32_t>& out) const {
  // 1. Initial symbols: one per character (per byte in byte-level mode).
  thread_local std::vector<int32_t> ids;
  ids.clear();
  int32_t pending_unk = -1;
  const bool affixes = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  std::string symbol;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    if (byte_level) {
      const auto b = static_cast<unsigned char>(word[i++]);
      if (!affixes && byte_symbol_id_[b] >= 0) {
        if (pending_unk >= 0) ids.push_back(pending_unk), pending_unk = -1;
        ids.push_back(byte_symbol_id_[b]);
        continue;
      }
      symbol.clear();
      utf8_append(symbol, byte_to_unicode()[b]);
    } else {
      const size_t len = utf8_valid_length(word, i);
      i += len ? len : 1;
      symbol.assign(word.substr(start, i - start));
    }
    if (affixes) {
      if (start > 0 && !continuing_subword_prefix_.empty()) symbol.insert(0, continuing_subword_prefix_);
      if (i >= word.size() && !end_of_word_suffix_.empty()) symbol += end_of_word_suffix_;
    }
    add_char_symbols(symbol, i - start, ids, pending_unk);
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);

  const size_t n = ids.size();
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  // 2. Merge lowest rank first, leftmost on ties, over a doubly linked list of symbols.
  struct Symbol {
    int32_t id, prev, next;
  };
  thread_local std::vector<Symbol> sym;
  sym.resize(n);
  for (size_t k = 0; k < n; ++k)
    sym[k] = {ids[k], static_cast<int32_t>(k) - 1, k + 1 < n ? static_cast<int32_t>(k + 1) : -1};
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Candidate> heap;
  heap.clear();
  auto push = [&](int32_t pos) {
    const int32_t next = sym[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    if (const MergeEntry* m = find_merge(sym[static_cast<size_t>(pos)].id, sym[static_cast<size_t>(next)].id)) {
      heap.push_back({m->rank, pos, m->new_id});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (size_t k = 0; k + 1 < n; ++k) push(static_cast<int32_t>(k));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = sym[static_cast<size_t>(c.pos)];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(left.next)];
    const MergeEntry* m = find_merge(left.id, right.id);
    if (!m || m->new_id != c.new_id) continue;  // stale candidate
    left.id = c.new_id;
    right.id = -1;  // removed
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = sym[static_cast<size_t>(k)].next) out.push_back(sym[static_cast<size_t>(k)].id);
}

}  // namespace latentserve::tokenizer
