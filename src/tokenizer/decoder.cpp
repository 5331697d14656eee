#include "tokenizer/decoder.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode_text.h"

namespace latentserve::tokenizer {

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all_mapped = true;
      for (size_t i = 0; i < t.size();) {
        const int b = unicode_to_byte(utf8_next(t, i));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        bytes += static_cast<char>(b);
      }
      if (!all_mapped) {  // a token outside the byte alphabet contributes its own bytes
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class Metaspace final : public Decoder {
 public:
  Metaspace(const nlohmann::json& config, const std::string& file) {
    replacement_ = config.value("replacement", std::string("\xE2\x96\x81"));
    if (config.contains("prepend_scheme")) prepend_ = config["prepend_scheme"].get<std::string>() != "never";
    else prepend_ = config.value("add_prefix_space", true);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepend_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepend_ = true;
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(kReplacementChar);
      pending.clear();
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        pending += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class Strip final : public Decoder {
 public:
  Strip(const nlohmann::json& config) {
    content_ = config.at("content").get<std::string>();
    start_ = config.value("start", 0);
    stop_ = config.value("stop", 0);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (int k = 0; k < start_ && b < e && t.compare(b, content_.size(), content_) == 0; ++k) b += content_.size();
      for (int k = 0; k < stop_ && e >= b + content_.size() && t.compare(e - content_.size(), content_.size(), content_) == 0; ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }
  bool prefix_stable() const override { return stop_ == 0; }

 private:
  std::string content_;
  int start_ = 0, stop_ = 0;
};

class Replace final : public Decoder {
 public:
  Replace(const nlohmann::json& config, const std::string& file)
      : pattern_(pattern_from_json(config.at("pattern"), "Replace decoder in " + file)),
        content_(config.at("content").get<std::string>()) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }
  bool prefix_stable() const override {
    for (const auto& s : steps_)
      if (!s->prefix_stable()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& file) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, "decoder", file);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(config, file);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(config);
  if (type == "Replace") return std::make_unique<Replace>(config, file);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& c : config.at("decoders"))
      if (auto d = make_decoder(c, file)) steps.push_back(std::move(d));
    return std::make_unique<Sequence>(std::move(steps));
  }
  fail("{}: decoder type '{}' is not supported (supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
       "Replace, Sequence)", file, type);
}

}  // namespace latentserve::tokenizer
