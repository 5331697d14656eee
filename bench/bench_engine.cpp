// Engine throughput on the CPU: output tokens/s for 1, 8, 32 and 128 concurrent
// requests on a small synthetic Llama-shaped model, with the scheduler's own share of
// each step. A benchmark: prints figures, writes JSON, asserts nothing.
//   bench_engine [--threads N] [--prompt 64] [--output 32] [--json FILE]
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/llm_engine.h"
#include "model/architectures.h"
#include "bench_args.h"

using namespace latentserve;

namespace {
const char* kSmallModel = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8192,
  "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4,
  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
  "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "hidden_act": "silu"})";
}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  int64_t prompt_len = 64, output_len = 32;
  std::string json_path = "bench_engine.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = int(bench::int_arg(flag, argv[i + 1]));
    else if (flag == "--prompt") prompt_len = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--output") output_len = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--json") json_path = argv[i + 1];
    else { fmt::print(stderr, "unknown flag {}\n", flag); return 2; }
  }
  ThreadPool pool(threads);
  ModelConfig config = ModelConfig::from_json(nlohmann::json::parse(kSmallModel), "bench model");
  auto model = build_causal_lm(config, std::make_unique<SyntheticWeights>(DType::BF16, 7), pool);

  fmt::print("latentserve engine throughput: synthetic Llama (hidden 512, 4 layers, GQA 8/2, vocab 8192, bf16),\n"
             "prompt {} + output {} tokens per request, CPU, {} threads\n", prompt_len, output_len, pool.n_threads());
  fmt::print("{:>11} {:>12} {:>12} {:>11} {:>14} {:>12}\n", "concurrent", "output tok/s", "wall s", "steps",
             "sched ms/step", "sched share");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t n : {1, 8, 32, 128}) {
    EngineConfig ec;
    ec.scheduler.max_num_seqs = n;
    ec.scheduler.max_num_batched_tokens = std::max<int64_t>(512, n);
    ec.enable_prefix_caching = false;  // distinct prompts anyway; measure the plain path
    LLMEngine engine(*model, ec, pool);
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
      for (int64_t t = 0; t < prompt_len; ++t) prompt[size_t(t)] = int32_t((r * 131 + t * 7919) % config.vocab_size);
      SamplingParams p;
      p.temperature = 0;
      p.max_tokens = output_len;
      p.ignore_eos = true;
      engine.add_request("r" + std::to_string(r), prompt, p);
    }
    const auto t0 = std::chrono::steady_clock::now();
    while (engine.has_unfinished()) engine.step();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineMetrics& m = engine.metrics();
    const double tok_s = double(m.generated_tokens) / wall;
    const double share = m.scheduler_seconds / m.step_seconds;
    fmt::print("{:>11} {:>12.1f} {:>12.2f} {:>11} {:>14.4f} {:>11.3f}%\n", n, tok_s, wall, m.n_steps,
               1e3 * m.scheduler_seconds / double(m.n_steps), 100 * share);
    rows.push_back({{"concurrent", n}, {"output_tokens_per_s", tok_s}, {"wall_s", wall}, {"steps", m.n_steps},
                    {"scheduler_ms_per_step", 1e3 * m.scheduler_seconds / double(m.n_steps)},
                    {"scheduler_share", share}});
  }
  std::ofstream(json_path) << nlohmann::json{{"rows", rows}}.dump(2) << "\n";
  fmt::print("wrote {}\n", json_path);
  return 0;
}
