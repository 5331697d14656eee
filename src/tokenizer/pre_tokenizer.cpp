#include "tokenizer/pre_tokenizer.h"

#include <functional>
#include <utility>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {

namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;
using Matcher = std::function<void(std::string_view, Ranges&)>;

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const nlohmann::json& config, const std::string& file) {
  const std::string b = config.at("behavior").get<std::string>();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail("{}: split behavior '{}' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
       file, b);
}

// Splits every piece at the matches of `matcher` as HF's NormalizedString::split does.
void split_pieces(PreTokenized& p, const Matcher& matcher, Behavior behavior, bool invert) {
  std::vector<PreToken> out;
  out.reserve(p.pieces.size() * 2);
  Ranges matches;
  struct Part { size_t b, e; bool is_match; };
  std::vector<Part> parts;
  for (PreToken& piece : p.pieces) {
    const std::string_view text = piece.text;
    matches.clear();
    matcher(text, matches);
    if (matches.empty() && !invert) {  // fast path: nothing to split
      out.push_back(std::move(piece));
      continue;
    }
    parts.clear();
    size_t prev = 0;
    for (auto [b, e] : matches) {
      if (b > prev) parts.push_back({prev, b, false});
      parts.push_back({b, e, true});
      prev = e;
    }
    if (prev < text.size()) parts.push_back({prev, text.size(), false});
    if (invert)
      for (Part& part : parts) part.is_match = !part.is_match;
    // Merge according to the behavior into [begin, end) ranges to keep.
    std::vector<std::pair<size_t, size_t>> keep;
    switch (behavior) {
      case Behavior::Removed:
        for (const Part& part : parts)
          if (!part.is_match) keep.emplace_back(part.b, part.e);
        break;
      case Behavior::Isolated:
        for (const Part& part : parts) keep.emplace_back(part.b, part.e);
        break;
      case Behavior::MergedWithPrevious: {
        bool prev_match = false;
        for (const Part& part : parts) {
          if (part.is_match && !prev_match && !keep.empty()) keep.back().second = part.e;
          else keep.emplace_back(part.b, part.e);
          prev_match = part.is_match;
        }
        break;
      }
      case Behavior::MergedWithNext: {
        bool prev_match = false;
        for (const Part& part : parts) {
          if (!part.is_match && prev_match && !keep.empty()) keep.back().second = part.e;
          else keep.emplace_back(part.b, part.e);
          prev_match = part.is_match;
        }
        break;
      }
      case Behavior::Contiguous: {
        bool prev_match = false;
        for (const Part& part : parts) {
          if (part.is_match && prev_match && !keep.empty()) keep.back().second = part.e;
          else keep.emplace_back(part.b, part.e);
          prev_match = part.is_match;
        }
        break;
      }
    }
    for (auto [b, e] : keep)
      if (e > b) out.push_back({std::string(text.substr(b, e - b)), piece.at_input_start && b == 0});
  }
  p.pieces = std::move(out);
}

// Matches of a per-character predicate (HF's `split(char::is_xxx, ...)`): one range per char.
Matcher char_matcher(bool (*predicate)(char32_t)) {
  return [predicate](std::string_view text, Ranges& out) {
    for (size_t i = 0; i < text.size();) {
      const size_t start = i;
      if (predicate(utf8_next(text, i))) out.emplace_back(start, i);
    }
  };
}

bool is_ascii_or_unicode_punctuation(char32_t cp);

class Split final : public PreTokenizer {
 public:
  Split(const nlohmann::json& config, const std::string& file)
      : pattern_(pattern_from_json(config.at("pattern"), "Split pre-tokenizer in " + file)),
        behavior_(parse_behavior(config, file)),
        invert_(config.value("invert", false)) {}
  void pre_tokenize(PreTokenized& p) const override {
    if (p.byte_level) fail("a Split pre-tokenizer after ByteLevel is not supported");
    split_pieces(p, [this](std::string_view t, Ranges& r) { pattern_.find_all(t, r); }, behavior_, invert_);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(const nlohmann::json& config, const std::string& file)
      : add_prefix_space_(config.value("add_prefix_space", true)), use_regex_(config.value("use_regex", true)) {
    if (use_regex_) regex_ = std::make_unique<Regex>(kGpt2Pattern, "ByteLevel pre-tokenizer in " + file);
  }
  void pre_tokenize(PreTokenized& p) const override {
    if (p.byte_level) fail("two ByteLevel pre-tokenizers in one pipeline are not supported");
    if (add_prefix_space_)
      for (PreToken& piece : p.pieces)
        if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
    if (use_regex_)
      split_pieces(p, [this](std::string_view t, Ranges& r) { regex_->find_all(t, r); }, Behavior::Isolated, false);
    p.byte_level = true;
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Regex> regex_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void pre_tokenize(PreTokenized& p) const override {
    if (p.byte_level) fail("a Digits pre-tokenizer after ByteLevel is not supported");
    split_pieces(p, char_matcher(&is_numeric), individual_ ? Behavior::Isolated : Behavior::Contiguous, false);
  }

 private:
  bool individual_;
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const nlohmann::json& config, const std::string& file) {
    replacement_ = config.value("replacement", std::string("\xE2\x96\x81"));
    split_ = config.value("split", true);
    if (config.contains("prepend_scheme")) {
      const std::string s = config["prepend_scheme"].get<std::string>();
      if (s == "always") scheme_ = Scheme::Always;
      else if (s == "first") scheme_ = Scheme::First;
      else if (s == "never") scheme_ = Scheme::Never;
      else fail("{}: Metaspace prepend_scheme '{}' is not one of always, first, never", file, s);
    } else {
      scheme_ = config.value("add_prefix_space", true) ? Scheme::Always : Scheme::Never;
    }
  }
  void pre_tokenize(PreTokenized& p) const override {
    if (p.byte_level) fail("a Metaspace pre-tokenizer after ByteLevel is not supported");
    for (PreToken& piece : p.pieces) {
      std::string replaced;
      replaced.reserve(piece.text.size() + 8);
      for (char c : piece.text) {
        if (c == ' ') replaced += replacement_;
        else replaced += c;
      }
      const bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == Scheme::Always || (scheme_ == Scheme::First && piece.at_input_start)))
        replaced.insert(0, replacement_);
      piece.text = std::move(replaced);
    }
    if (split_) {
      const std::string rep = replacement_;
      split_pieces(p, [rep](std::string_view t, Ranges& r) {
        for (size_t pos = t.find(rep); pos != std::string_view::npos; pos = t.find(rep, pos + rep.size()))
          r.emplace_back(pos, pos + rep.size());
      }, Behavior::MergedWithNext, false);
    }
  }

 private:
  enum class Scheme { Always, First, Never };
  std::string replacement_;
  Scheme scheme_ = Scheme::Always;
  bool split_ = true;
};

class RegexSplit final : public PreTokenizer {
 public:
  RegexSplit(const char* pattern, Behavior behavior, bool invert, const std::string& what)
      : regex_(pattern, what), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(PreTokenized& p) const override {
    if (p.byte_level) fail("a {} after ByteLevel is not supported", regex_.pattern());
    split_pieces(p, [this](std::string_view t, Ranges& r) { regex_.find_all(t, r); }, behavior_, invert_);
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class Punctuation final : public PreTokenizer {
 public:
  explicit Punctuation(Behavior behavior) : behavior_(behavior) {}
  void pre_tokenize(PreTokenized& p) const override {
    split_pieces(p, char_matcher(&is_ascii_or_unicode_punctuation), behavior_, false);
  }

 private:
  Behavior behavior_;
};

bool is_ascii_or_unicode_punctuation(char32_t cp) {
  if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  static const Regex punct(R"(\p{P})", "Punctuation pre-tokenizer");
  std::string s;
  utf8_append(s, cp);
  Ranges r;
  punct.find_all(s, r);
  return !r.empty();
}

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(PreTokenized& p) const override {
    for (const auto& s : steps_) s->pre_tokenize(p);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config, const std::string& file) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, "pre_tokenizer", file);
  if (type == "Split") return std::make_unique<Split>(config, file);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(config, file);
  if (type == "Digits") return std::make_unique<Digits>(config.value("individual_digits", false));
  if (type == "Metaspace") return std::make_unique<Metaspace>(config, file);
  if (type == "Whitespace")
    return std::make_unique<RegexSplit>(R"(\w+|[^\w\s]+)", Behavior::Removed, true, "Whitespace pre-tokenizer");
  if (type == "WhitespaceSplit")
    return std::make_unique<RegexSplit>(R"(\s+)", Behavior::Removed, false, "WhitespaceSplit pre-tokenizer");
  if (type == "Punctuation")
    return std::make_unique<Punctuation>(config.contains("behavior") ? parse_behavior(config, file) : Behavior::Isolated);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& c : config.at("pretokenizers"))
      if (auto s = make_pre_tokenizer(c, file)) steps.push_back(std::move(s));
    return std::make_unique<Sequence>(std::move(steps));
  }
  fail("{}: pre_tokenizer type '{}' is not supported (supported: ByteLevel, Split, Digits, Metaspace, "
       "Whitespace, WhitespaceSplit, Punctuation, Sequence)", file, type);
}

}  // namespace latentserve::tokenizer
