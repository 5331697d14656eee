// The Llama family on the GPU end to end: every Llama-family fixture against Hugging Face
// transformers' logits (tests/fixtures, tools/make_fixtures.py), a head_dim 128 model
// (the tensor-core kernels) against the CPU path on the same weights, CUDA graphs against
// eager execution, FP8 KV against bf16 KV, and the errors for what the GPU path does not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/tolerance.h"
#include "core/error.h"
#include "cuda/gpu_test_util.h"
#include "engine/llm_engine.h"
#include "engine/offline_runner.h"
#include "model/architectures.h"

namespace latentserve {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable (a benchmarking knob the model reads when built) for the
// scope, and puts back a value set from outside afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* variable, const char* value) : variable_(variable) {
    if (const char* outside = std::getenv(variable)) saved_ = outside;
    ::setenv(variable, value, 1);
  }
  ~ScopedEnv() {
    if (saved_) ::setenv(variable_, saved_->c_str(), 1);
    else ::unsetenv(variable_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* variable_;
  std::optional<std::string> saved_;
};

ModelOptions on_cuda(bool graphs = true) {
  ModelOptions o;
  o.device = "cuda";
  o.cuda_graphs = graphs;
  return o;
}

std::vector<std::string> llama_family_fixtures() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(LATENTSERVE_FIXTURES_DIR)) {
    if (!fs::exists(entry.path() / "reference.json")) continue;
    const std::string name = entry.path().filename().string();
    if (name.rfind("deepseek", 0) == 0) continue;  // MLA: CPU only
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][vocab]
  std::vector<std::vector<int32_t>> greedy;
  std::vector<double> greedy_margin;
};

Reference load_reference(const fs::path& dir) {
  std::ifstream in(dir / "reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j.at("prompts").get<std::vector<std::vector<int32_t>>>(),
          j.at("logits").get<std::vector<std::vector<std::vector<float>>>>(),
          j.at("greedy").get<std::vector<std::vector<int32_t>>>(), j.at("greedy_margin").get<std::vector<double>>()};
}

// ||a - b|| / ||b|| and max |a - b| over two logits tensors.
struct LogitsError {
  double relative_l2 = 0, max_abs = 0, ref_rms = 0;
};
LogitsError compare(const std::vector<float>& a, const std::vector<double>& b) {
  LogitsError e;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
    if (std::isnan(a[i])) e.max_abs = INFINITY;
  }
  e.relative_l2 = std::sqrt(num / den);
  e.ref_rms = std::sqrt(den / double(a.size()));
  return e;
}

class CudaFixture : public ::testing::TestWithParam<std::string> {};

// All prompts in one ragged batch, prefill chunked into 5-token steps (so steps mix decode
// tokens and prefill chunks and read cached context through the block tables), then greedy
// decoding, which runs pure-decode steps from CUDA graphs.
TEST_P(CudaFixture, LogitsMatchTransformersAndTheCpuPath) {
  LS_REQUIRE_GPU();
  const fs::path dir = fs::path(LATENTSERVE_FIXTURES_DIR) / GetParam();
  const Reference ref = load_reference(dir);
  ThreadPool pool(2);
  auto gpu = load_causal_lm(dir, pool, on_cuda());
  auto cpu = load_causal_lm(dir, pool);
  std::vector<SequenceRequest> requests;
  for (size_t i = 0; i < ref.prompts.size(); ++i) requests.push_back({ref.prompts[i], int64_t(ref.greedy[i].size()), false});
  for (const RunnerOptions options : {RunnerOptions{16, 5}, RunnerOptions{32, 512}}) {
    SCOPED_TRACE("block size " + std::to_string(options.block_size_tokens) + ", step budget " +
                 std::to_string(options.max_batched_tokens));
    auto on_gpu = OfflineRunner(*gpu, options, pool).run(requests, true);
    auto on_cpu = OfflineRunner(*cpu, options, pool).run(requests, true);
    for (size_t i = 0; i < requests.size(); ++i) {
      std::vector<double> hf, cpu_logits(on_cpu[i].prompt_logits.begin(), on_cpu[i].prompt_logits.end());
      for (const auto& row : ref.logits[i]) hf.insert(hf.end(), row.begin(), row.end());
      ASSERT_EQ(on_gpu[i].prompt_logits.size(), hf.size());
      const LogitsError vs_hf = compare(on_gpu[i].prompt_logits, hf), vs_cpu = compare(on_gpu[i].prompt_logits, cpu_logits);
      // bf16 activations (the GPU path) against f32 compute: each of a dozen roundings per
      // layer is 2^-9 relative, so logits land within a few percent of their scale.
      EXPECT_LE(vs_hf.relative_l2, testing::kLogitsRelL2TolBf16Compute) << "prompt " << i << " vs transformers";
      EXPECT_LE(vs_hf.max_abs, testing::kLogitsMaxAbsTolBf16Compute * vs_hf.ref_rms) << "prompt " << i << " vs transformers";
      EXPECT_LE(vs_cpu.relative_l2, testing::kLogitsRelL2TolBf16Compute) << "prompt " << i << " vs the CPU path";
      const double margin_needed = 4 * vs_hf.max_abs;
      if (ref.greedy_margin[i] > margin_needed)
        EXPECT_EQ(on_gpu[i].generated, ref.greedy[i]) << "prompt " << i << " greedy continuation vs transformers";
      else
        std::cout << "[ note ] prompt " << i << ": greedy margin " << ref.greedy_margin[i] << " < " << margin_needed
                  << " (4x the GPU's logits error): continuation not compared\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixture, ::testing::ValuesIn(llama_family_fixtures()),
                         [](const auto& info) { return info.param; });

// A head_dim 128 GQA model (the tensor-core decode and prefill kernels), the same random bf16
// weights on both paths: the GPU gets them from the host (not the device-side synthetic fill).
class HostSyntheticWeights final : public WeightSource {
 public:
  explicit HostSyntheticWeights(uint64_t seed) : inner_(DType::BF16, seed) {}
  TensorView get(const std::string& name, std::initializer_list<int64_t> shape) override { return inner_.get(name, shape); }
  bool has(const std::string& name) const override { return inner_.has(name); }

 private:
  SyntheticWeights inner_;
};

ModelConfig gqa128_config() {
  const nlohmann::json j = {{"model_type", "llama"},           {"hidden_size", 512},
                            {"intermediate_size", 768},         {"num_hidden_layers", 2},
                            {"num_attention_heads", 8},         {"num_key_value_heads", 2},
                            {"head_dim", 128},                  {"vocab_size", 1000},
                            {"max_position_embeddings", 4096},  {"rms_norm_eps", 1e-5},
                            {"rope_theta", 500000.0},           {"hidden_act", "silu"},
                            {"tie_word_embeddings", false},     {"bos_token_id", 1},
                            {"eos_token_id", 2}};
  return ModelConfig::from_json(j, "gqa128 test config");
}

std::vector<SequenceRequest> mixed_requests(int n, int64_t max_new, int vocab) {
  std::vector<SequenceRequest> out;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> len(1, 300), tok(3, vocab - 1);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(size_t(len(rng)));
    for (auto& t : prompt) t = tok(rng);
    out.push_back({prompt, max_new, false});
  }
  return out;
}

TEST(CudaLlamaModel, Head128GqaMatchesTheCpuPath) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto cpu = build_causal_lm(gqa128_config(), std::make_unique<SyntheticWeights>(DType::BF16, 99), pool);
  auto gpu = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(99), pool, on_cuda());
  const auto requests = mixed_requests(6, 8, 1000);
  auto a = OfflineRunner(*gpu, {16, 128}, pool).run(requests, true);
  auto b = OfflineRunner(*cpu, {16, 128}, pool).run(requests, true);
  int same_tokens = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<double> ref(b[i].prompt_logits.begin(), b[i].prompt_logits.end());
    const LogitsError e = compare(a[i].prompt_logits, ref);
    EXPECT_LE(e.relative_l2, testing::kLogitsRelL2TolBf16Compute) << "prompt " << i << " of " << requests[i].prompt.size() << " tokens";
    for (size_t t = 0; t < a[i].generated.size(); ++t, ++total) same_tokens += a[i].generated[t] == b[i].generated[t];
  }
  std::cout << "[ info ] greedy tokens equal to the CPU path: " << same_tokens << " of " << total << "\n";
}

// One token per step (a step budget of 1): every step is a single row, which runs the fused
// gemv chain (record_fused_gemv: norms, SwiGLU and residual adds inside the gemv kernels).
// Against the same model with the chain off (LATENTSERVE_CUDA_FUSED_GEMV_ROWS=0: separate
// kernels, GEMMs autotuned) the logits differ by a few bf16 roundings (the fused norm does not
// round the normed rows, and the GEMMs differ), and both match the CPU path within bf16 tolerance.
TEST(CudaLlamaModel, FusedGemvChainMatchesTheUnfusedKernelsAndTheCpuPath) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  // 0 (separate kernels) and 1 (the fused chain, the default) explicitly.
  auto build = [&](const char* rows) {
    ScopedEnv knob("LATENTSERVE_CUDA_FUSED_GEMV_ROWS", rows);
    return build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(31), pool, on_cuda());
  };
  auto unfused = build("0");
  auto fused = build("1");
  auto cpu = build_causal_lm(gqa128_config(), std::make_unique<SyntheticWeights>(DType::BF16, 31), pool);
  const auto requests = mixed_requests(2, 6, 1000);
  auto a = OfflineRunner(*fused, {16, 1}, pool).run(requests, true);
  auto b = OfflineRunner(*unfused, {16, 1}, pool).run(requests, true);
  auto c = OfflineRunner(*cpu, {16, 1}, pool).run(requests, true);
  int same_tokens = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<double> ref_unfused(b[i].prompt_logits.begin(), b[i].prompt_logits.end());
    const std::vector<double> ref_cpu(c[i].prompt_logits.begin(), c[i].prompt_logits.end());
    const double vs_unfused = compare(a[i].prompt_logits, ref_unfused).relative_l2;
    const double fused_vs_cpu = compare(a[i].prompt_logits, ref_cpu).relative_l2;
    const double unfused_vs_cpu = compare(b[i].prompt_logits, ref_cpu).relative_l2;
    std::cout << "[ info ] prompt " << i << " logits relative L2: fused vs unfused " << vs_unfused << ", fused vs CPU "
              << fused_vs_cpu << ", unfused vs CPU " << unfused_vs_cpu << "\n";
    EXPECT_LE(vs_unfused, 1e-2) << "prompt " << i << " vs the unfused GPU step";
    EXPECT_LE(fused_vs_cpu, testing::kLogitsRelL2TolBf16Compute) << "prompt " << i << " vs the CPU path";
    EXPECT_LE(unfused_vs_cpu, testing::kLogitsRelL2TolBf16Compute) << "prompt " << i << " (unfused) vs the CPU path";
    for (size_t t = 0; t < a[i].generated.size(); ++t, ++total) same_tokens += a[i].generated[t] == b[i].generated[t];
  }
  std::cout << "[ info ] fused vs unfused greedy tokens equal: " << same_tokens << " of " << total << "\n";
  EXPECT_GE(same_tokens, total - 2);
}

// The fused chain's q|k|v gemv does RoPE + the K/V write in its epilogue (LATENTSERVE_CUDA_FUSED_ROPE=1) with
// the arithmetic of the RoPE kernel it replaces (LATENTSERVE_CUDA_FUSED_ROPE=0), so one token
// per step gives bit-equal logits and tokens both ways: with a bf16 cache, and with an FP8 one
// (per-head scales), whose first step calibrates through the separate kernels and whose later
// steps write through the gemv. The GEMM autotune is off in both models, so that they run the
// same GEMM kernels (the LM head's would otherwise be picked by timing).
TEST(CudaLlamaModel, RopeInTheQkvGemvGivesTheSameBitsAsTheRopeKernel) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto build = [&](const char* on) {
    ScopedEnv no_autotune("LATENTSERVE_CUDA_GEMM_AUTOTUNE", "0");
    ScopedEnv knob("LATENTSERVE_CUDA_FUSED_ROPE", on);
    return build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(41), pool, on_cuda());
  };
  auto kernel = build("0");
  auto in_gemv = build("1");
  const auto requests = mixed_requests(2, 5, 1000);
  for (DType kv_dtype : {DType::BF16, DType::F8_E4M3}) {
    SCOPED_TRACE(kv_dtype == DType::BF16 ? "bf16 KV" : "fp8 KV");
    RunnerOptions one_row{16, 1};  // a step budget of 1: every step is one row (the fused chain)
    one_row.kv_options.dtype = kv_dtype;
    one_row.kv_options.scale = cpu::KvScaleGranularity::PerHead;
    const auto a = OfflineRunner(*in_gemv, one_row, pool).run(requests, true);
    const auto b = OfflineRunner(*kernel, one_row, pool).run(requests, true);
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_FALSE(a[i].prompt_logits.empty());
      EXPECT_EQ(a[i].prompt_logits, b[i].prompt_logits) << "prompt " << i;
      EXPECT_EQ(a[i].generated, b[i].generated) << "request " << i;
    }
  }
}

// Graph replay runs the very kernels eager execution runs, on the same padded shapes: the
// tokens and logits must be bitwise equal.
TEST(CudaLlamaModel, CudaGraphsGiveTheSameTokensAsEagerSteps) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto graphs = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(5), pool, on_cuda(true));
  auto eager = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(5), pool, on_cuda(false));
  const auto requests = mixed_requests(11, 24, 1000);  // 11 sequences: a padded batch bucket (16)
  auto a = OfflineRunner(*graphs, {16, 256}, pool).run(requests, false);
  auto b = OfflineRunner(*eager, {16, 256}, pool).run(requests, false);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(a[i].generated, b[i].generated) << "request " << i;
}

// Captured decode graphs bake in the KV cache's pointers and dtype: a model that ran with one
// cache must capture anew for the next, even where the new cache lands at the freed one's host
// and device addresses (as a runner's cache made after another's often does). The FP8 tokens
// after a bf16 run are those of a model that only ever saw the FP8 cache, up to the odd
// near-tie (each model autotunes its GEMMs by timing, so the two may round differently); graphs
// replayed on the wrong cache read FP8 bytes as bf16 and give other tokens almost everywhere.
TEST(CudaLlamaModel, CudaGraphsAreCapturedAgainForANewCache) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto reused = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(8), pool, on_cuda(true));
  auto fresh = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(8), pool, on_cuda(true));
  const auto requests = mixed_requests(3, 12, 1000);
  RunnerOptions bf16_kv{16, 256}, fp8_kv{16, 256};
  bf16_kv.kv_options.dtype = DType::BF16;
  fp8_kv.kv_options.dtype = DType::F8_E4M3;
  fp8_kv.kv_options.scale = cpu::KvScaleGranularity::PerHead;
  OfflineRunner(*reused, bf16_kv, pool).run(requests, false);  // captures graphs on a bf16 cache
  const auto after_bf16 = OfflineRunner(*reused, fp8_kv, pool).run(requests, false);
  const auto only_fp8 = OfflineRunner(*fresh, fp8_kv, pool).run(requests, false);
  int same = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i)
    for (size_t t = 0; t < only_fp8[i].generated.size(); ++t, ++total)
      same += t < after_bf16[i].generated.size() && after_bf16[i].generated[t] == only_fp8[i].generated[t];
  std::cout << "[ info ] FP8 tokens after a bf16 run equal to a fresh model's: " << same << " of " << total << "\n";
  EXPECT_EQ(total, 3 * 12);
  EXPECT_GE(same, total - 2);
}

// The engine picks greedy tokens on the device, with chunked prefill, a pool small enough to
// preempt, and prefix caching on. GPU GEMMs pick kernels by shape, so a request's tokens can
// depend on what it was batched with where two logits nearly tie (no bitwise batch
// invariance, as in other GPU engines): the same schedule must give the same tokens (run
// twice), and most requests must match the OfflineRunner's differently batched run exactly.
std::map<std::string, std::vector<int32_t>> run_engine(CausalLM& model, ThreadPool& pool,
                                                       const std::vector<SequenceRequest>& requests, int64_t* preemptions) {
  EngineConfig config;
  config.block_size_tokens = 16;
  config.n_kv_blocks = 60;  // ~960 tokens: fewer than the 20 requests need at once
  config.scheduler.max_num_batched_tokens = 96;
  config.scheduler.max_model_len = 4096;
  LLMEngine engine(model, config, pool);
  for (size_t i = 0; i < requests.size(); ++i) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = requests[i].max_new_tokens;
    p.ignore_eos = true;
    engine.add_request(std::to_string(i), requests[i].prompt, p);
  }
  std::map<std::string, std::vector<int32_t>> got;
  while (engine.has_unfinished())
    for (auto& out : engine.step())
      if (out.finished) got[out.id] = out.output_tokens;
  EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0) << "every block returned";
  *preemptions = engine.metrics().n_preemptions;
  return got;
}

TEST(CudaLlamaModel, EngineOnTheGpuIsDeterministicAndAgreesWithTheOfflineRunner) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto model = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(11), pool, on_cuda());
  const auto requests = mixed_requests(20, 12, 1000);
  const auto expected = OfflineRunner(*model, {16, 512}, pool).run(requests, false);
  int64_t preemptions = 0, preemptions_again = 0;
  const auto first = run_engine(*model, pool, requests, &preemptions);
  const auto second = run_engine(*model, pool, requests, &preemptions_again);
  EXPECT_GT(preemptions, 0) << "the pool was meant to force preemptions";
  EXPECT_EQ(preemptions, preemptions_again);
  int identical = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string id = std::to_string(i);
    EXPECT_EQ(first.at(id), second.at(id)) << "request " << i << ": same schedule, same tokens";
    if (first.at(id) == expected[i].generated) {
      ++identical;
    } else {
      size_t at = 0;
      while (at < first.at(id).size() && first.at(id)[at] == expected[i].generated[at]) ++at;
      std::cout << "[ info ] request " << i << " diverges from the offline run at token " << at << "\n";
    }
  }
  std::cout << "[ info ] " << identical << " of " << requests.size() << " requests identical to the offline run\n";
  EXPECT_GE(identical, int(requests.size()) * 3 / 4);
}

// Sampling on the device (cuda::sample_rows with the host Sampler's draws) against the host
// Sampler on the same GPU logits: the same schedule twice, once choosing on the device and once
// copying logits back (EngineConfig::sample_on_device = false). Parameters are exact f32
// values, so the two can differ only where u * mass lands within ~1e-15 of a boundary.
// A request with a repetition penalty makes its steps take the host path in both runs.
TEST(CudaLlamaModel, SamplingOnTheDeviceChoosesTheHostSamplersTokens) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto model = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(21), pool, on_cuda());
  const auto requests = mixed_requests(12, 20, 1000);
  const auto params_of = [&](size_t i) {
    SamplingParams p;
    p.max_tokens = requests[i].max_new_tokens;
    p.ignore_eos = true;
    p.seed = 100 + i;
    switch (i % 6) {
      case 0: p.temperature = 0; break;
      case 1: p.temperature = 0.75; break;
      case 2: p.temperature = 1.0, p.top_k = 40; break;
      case 3: p.temperature = 1.25, p.top_p = 0.875; break;
      case 4: p.temperature = 0.5, p.min_p = 0.0625, p.top_k = 200, p.top_p = 0.9375; break;
      case 5: p.temperature = 1.0, p.n = 2; break;
    }
    if (i == 7) p.repetition_penalty = 1.25;  // host-only: its steps copy logits back
    return p;
  };
  const auto run = [&](bool on_device, bool all_greedy) {
    EngineConfig config;
    config.block_size_tokens = 16;
    config.n_kv_blocks = 400;
    config.scheduler.max_num_batched_tokens = 256;
    config.sample_on_device = on_device;
    LLMEngine engine(*model, config, pool);
    for (size_t i = 0; i < requests.size(); ++i) {
      SamplingParams p = params_of(i);
      if (all_greedy) p.temperature = 0, p.n = 1, p.repetition_penalty = 1.0;
      engine.add_request(std::to_string(i), requests[i].prompt, p);
    }
    std::map<std::pair<std::string, int>, std::vector<int32_t>> got;
    while (engine.has_unfinished())
      for (auto& out : engine.step())
        if (out.finished) got[{out.id, out.index}] = out.output_tokens;
    EXPECT_EQ(engine.kv_manager().stats().n_blocks_used, 0) << "every block returned";
    return got;
  };
  const auto device = run(true, false), host = run(false, false), greedy = run(true, true);
  ASSERT_EQ(device.size(), host.size());
  int sampled_away_from_greedy = 0;
  for (const auto& [key, tokens] : host) {
    EXPECT_EQ(device.at(key), tokens) << "request " << key.first << " completion " << key.second;
    if (params_of(std::stoul(key.first)).temperature > 0 && tokens != greedy.at({key.first, 0})) ++sampled_away_from_greedy;
  }
  EXPECT_EQ(device.size(), requests.size() + 2) << "the two n = 2 requests give two completions each";
  EXPECT_GE(sampled_away_from_greedy, 6) << "sampled requests should leave the greedy path";
}

// FP8 KV (per-head and per-tensor static scales, calibrated on the device) stays close to
// bf16 KV; the figure is printed, the bound is a sanity check, not the accuracy claim
// (bench_kv_fp8 measures that on the CPU).
TEST(CudaLlamaModel, Fp8KvStaysCloseToBf16Kv) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  auto model = build_causal_lm(gqa128_config(), std::make_unique<HostSyntheticWeights>(3), pool, on_cuda());
  const auto requests = mixed_requests(4, 4, 1000);
  RunnerOptions bf16_kv{16, 512};
  bf16_kv.kv_options.dtype = DType::BF16;
  const auto ref = OfflineRunner(*model, bf16_kv, pool).run(requests, true);
  for (auto scale : {cpu::KvScaleGranularity::PerHead, cpu::KvScaleGranularity::PerTensor}) {
    RunnerOptions fp8 = bf16_kv;
    fp8.kv_options.dtype = DType::F8_E4M3;
    fp8.kv_options.scale = scale;
    const auto got = OfflineRunner(*model, fp8, pool).run(requests, true);
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::vector<double> r(ref[i].prompt_logits.begin(), ref[i].prompt_logits.end());
      const LogitsError e = compare(got[i].prompt_logits, r);
      std::cout << "[ info ] fp8 " << cpu::kv_scale_granularity_name(scale) << " prompt " << i
                << ": relative L2 vs bf16 KV " << e.relative_l2 << "\n";
      EXPECT_LE(e.relative_l2, 0.1) << "prompt " << i;
    }
  }
  RunnerOptions per_block = bf16_kv;
  per_block.kv_options.dtype = DType::F8_E4M3;
  per_block.kv_options.scale = cpu::KvScaleGranularity::PerBlock;
  EXPECT_THROW(OfflineRunner(*model, per_block, pool).run(requests, false), Error);
}

TEST(CudaLlamaModel, WhatTheGpuPathDoesNotRunIsAClearError) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  const fs::path fixtures(LATENTSERVE_FIXTURES_DIR);
  try {
    load_causal_lm(fixtures / "deepseek_v3_f32", pool, on_cuda());
    ADD_FAILURE() << "DeepSeek on cuda should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek_v3"), std::string::npos) << e.what();
  }
  auto model = load_causal_lm(fixtures / "llama_gqa_f32", pool, on_cuda());
  cpu::CpuKvCache host_cache(model->attention_spec(), model->n_layer(), 4, 16);
  ForwardBatch empty;
  std::vector<float> logits(1);
  EXPECT_THROW(model->forward(empty, host_cache, logits.data()), Error) << "a host KV cache handed to a GPU model";
}

// The benchmarking knobs read from the environment: a value that is not what the knob takes is
// an error naming the variable, not a silent default (an outside value is put back afterwards).
TEST(CudaLlamaModel, ABadTuningVariableIsAnErrorNamingIt) {
  LS_REQUIRE_GPU();
  ThreadPool pool(2);
  const fs::path fixtures(LATENTSERVE_FIXTURES_DIR);
  const std::pair<const char*, const char*> bad[] = {{"LATENTSERVE_CUDA_GEMV_ROWS", "abc"},
                                                     {"LATENTSERVE_CUDA_FUSED_GEMV_ROWS", "1x"},
                                                     {"LATENTSERVE_CUDA_FUSED_GEMV_ROWS", "9"},
                                                     {"LATENTSERVE_CUDA_GEMV_CONFIG", "r3u3"},
                                                     {"LATENTSERVE_CUDA_CONTEXT_BUCKETS", "0"},
                                                     {"LATENTSERVE_CUDA_FUSED_ROPE", "2"},
                                                     {"LATENTSERVE_CUDA_GEMM_AUTOTUNE", "yes"},
                                                     {"LATENTSERVE_CUDA_GEMM_CANDIDATES", "0"},
                                                     {"LATENTSERVE_CUDA_GEMM_CANDIDATES", "65"}};
  for (const auto& [variable, value] : bad) {
    SCOPED_TRACE(::testing::Message() << variable << "=" << value);
    ScopedEnv knob(variable, value);
    try {
      load_causal_lm(fixtures / "llama_gqa_f32", pool, on_cuda());
      ADD_FAILURE() << "should be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace latentserve
