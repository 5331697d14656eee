// Decode and prefill speed of a Llama-3.2-1B-shaped bf16 model with random weights
// on this machine's CPU, printed next to the machine's own measured memory read
// bandwidth and GEMM rate. A benchmark: it prints figures and asserts nothing.
//
//   bench_cpu_decode [--threads N] [--prompt 512] [--decode 32] [--json FILE]
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/offline_runner.h"
#include "model/architectures.h"
#include "perf/machine_probe.h"
#include "bench_args.h"

using namespace latentserve;

namespace {

// config.json of meta-llama/Llama-3.2-1B (published shape).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
  "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
  "hidden_act": "silu", "rope_theta": 500000.0, "bos_token_id": 128000, "eos_token_id": 128001,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "torch_dtype": "bfloat16"})";

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  int64_t prompt_len = 512, decode_len = 32;
  std::string json_path = "bench_cpu_decode.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--threads") threads = int(bench::int_arg(flag, argv[i + 1]));
    else if (flag == "--prompt") prompt_len = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--decode") decode_len = bench::int_arg(flag, argv[i + 1], 1);
    else if (flag == "--json") json_path = argv[i + 1];
    else { fmt::print(stderr, "unknown flag {}\n", flag); return 2; }
  }
  ThreadPool pool(threads);
  const double read_gb_s = measure_read_bandwidth_gb_per_s(pool);

  ModelConfig config = ModelConfig::from_json(nlohmann::json::parse(kLlama32_1B), "Llama-3.2-1B preset");
  auto weights = std::make_unique<SyntheticWeights>(DType::BF16, 1234);
  SyntheticWeights* synthetic = weights.get();
  auto model = build_causal_lm(config, std::move(weights), pool);
  const double weight_bytes = double(synthetic->bytes());

  // One prompt of prompt_len tokens, then decode_len greedy tokens at batch 1.
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int64_t i = 0; i < prompt_len; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % config.vocab_size);
  OfflineRunner runner(*model, {16, prompt_len}, pool);
  runner.run({{prompt, decode_len, false}}, false);
  const RunnerStats& s = runner.stats();

  // Bytes a decode step must read: every weight except the embedding table (one row is
  // read), plus the lm_head, which is the embedding table here (tied), plus the KV so far.
  const double H = double(config.hidden_size), V = double(config.vocab_size);
  const double embed_bytes = V * H * 2;
  const double lm_head_bytes = config.tie_word_embeddings ? embed_bytes : 0;  // untied: counted in weight_bytes
  const double mean_ctx = double(prompt_len) + double(decode_len) / 2;
  const double kv_bytes = mean_ctx * double(model->attention_spec().kv_bytes_per_token(DType::F32, config.n_layer));
  const double step_bytes = weight_bytes - embed_bytes + lm_head_bytes + kv_bytes;
  const double tpot_s = s.decode_seconds / double(s.decode_tokens);
  const double achieved_gb_s = step_bytes / tpot_s / 1e9;

  // Prefill FLOPs: 2 * (non-embedding weights + lm_head on the last token) per token, plus attention.
  const double linear_params = (weight_bytes - embed_bytes) / 2;
  const double attn_flops = 2.0 * 2 * double(config.n_layer) * double(config.n_head * config.head_dim) *
                            double(prompt_len) * double(prompt_len + 1) / 2;
  const double prefill_flops = 2 * linear_params * double(prompt_len) + 2 * V * H + attn_flops;
  const double prefill_gflop_s = prefill_flops / s.prefill_seconds / 1e9;
  const double gemm_gflop_s = measure_sgemm_gflop_per_s(pool, 512, 2048, 2048);

  fmt::print("latentserve bench: Llama-3.2-1B-shaped bf16, random weights, CPU, {} threads\n", pool.n_threads());
  fmt::print("  weights                  {:8.2f} GB\n", weight_bytes / 1e9);
  fmt::print("  measured read bandwidth  {:8.2f} GB/s\n", read_gb_s);
  fmt::print("  decode  batch 1          {:8.2f} tok/s   TPOT {:7.1f} ms   ctx {}..{}\n", 1.0 / tpot_s, tpot_s * 1e3,
             prompt_len, prompt_len + decode_len);
  fmt::print("     bytes per step        {:8.2f} GB  -> {:6.2f} GB/s = {:5.1f}% of measured bandwidth\n",
             step_bytes / 1e9, achieved_gb_s, 100 * achieved_gb_s / read_gb_s);
  fmt::print("     floor (bytes / bw)    {:8.1f} ms\n", step_bytes / (read_gb_s * 1e9) * 1e3);
  fmt::print("  prefill {} tokens       {:8.2f} tok/s   {:7.1f} GFLOP/s (sgemm alone: {:.1f} GFLOP/s)\n", prompt_len,
             double(s.prefill_tokens) / s.prefill_seconds, prefill_gflop_s, gemm_gflop_s);

  nlohmann::json out = {{"model", "llama-3.2-1b-shaped"}, {"dtype", "bf16"}, {"threads", pool.n_threads()},
                        {"read_bandwidth_gb_s", read_gb_s}, {"decode_tpot_ms", tpot_s * 1e3},
                        {"decode_tokens_per_s", 1.0 / tpot_s}, {"decode_bytes_per_step", step_bytes},
                        {"decode_fraction_of_bandwidth", achieved_gb_s / read_gb_s},
                        {"prefill_tokens", prompt_len}, {"prefill_tokens_per_s", double(s.prefill_tokens) / s.prefill_seconds},
                        {"prefill_gflop_s", prefill_gflop_s}, {"sgemm_gflop_s", gemm_gflop_s}};
  std::ofstream(json_path) << out.dump(2) << "\n";
  fmt::print("  wrote {}\n", json_path);
  return 0;
}
