#include "cli/cli_common.h"

#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "model/architectures.h"
#include "model/tensor_parallel.h"
#include "model/weight_source.h"
#include "perf/presets.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::cli {

void ModelArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model_dir, "Hugging Face checkpoint folder (config.json, *.safetensors)")->required();
  cmd->add_option("--block-size", block_size, "KV cache block size in tokens: 16, 32, 64 or 128 (default 16; 64 for MLA)");
  cmd->add_option("--attention", attention, "MLA compute path: auto (naive for short prefills, else absorbed), naive (materialise K/V), absorbed (latent space)");
  cmd->add_option("--threads", threads, "CPU threads (0 = all cores)");
  cmd->add_option("--kv-cache-dtype", kv_cache_dtype, "KV cache elements: auto (f32 on the CPU), bf16, fp8_e4m3");
  cmd->add_option("--kv-scale", kv_scale, "fp8 KV scale granularity: per-tensor, per-head, per-block (default per-block on cpu, per-head on cuda)");
  cmd->add_option("--max-batched-tokens", max_batched_tokens, "tokens per engine step (prefill is chunked)");
  cmd->add_option("--device", device, "where the model computes: cpu (default) or cuda");
  cmd->add_option("--gpu", gpu, "cuda: which GPU (ordinal, default 0)");
  cmd->add_flag("--enforce-eager", enforce_eager, "cuda: run every step eagerly (no CUDA graphs for decode)");
  cmd->add_option("--gpu-memory-utilization", gpu_memory_utilization,
                  "cuda: share of GPU memory for weights, activations and the KV cache (default 0.9)");
  cmd->add_option("--tensor-parallel-size,--tp", tensor_parallel_size,
                  "split every layer's heads and MLP columns over this many ranks (cpu: ranks run as threads; default 1)");
}

void ModelArgs::add_synthetic_to(CLI::App* cmd) {
  CLI::Option* model = cmd->get_option("--model");
  model->required(false);
  cmd->add_option("--synthetic", synthetic, "instead of --model: a preset (e.g. llama3-8b, tiny-bench) with random bf16 weights, no tokenizer")
      ->excludes(model);
}

std::unique_ptr<CausalLM> ModelArgs::load(ThreadPool& pool) const {
  if (model_dir.empty() == synthetic.empty()) fail("give exactly one of --model DIR and --synthetic PRESET");
  std::unique_ptr<CausalLM> model = !model_dir.empty()
                                        ? load_causal_lm(model_dir, pool, model_options())
                                        : synthetic_causal_lm(perf::model_preset(synthetic, "--synthetic"), pool,
                                                              model_options());
  if (tensor_parallel_size > 1)
    fmt::print(stderr, "{}\n", tensor_parallel_summary(model->config(), tensor_parallel_size));
  return model;
}

std::unique_ptr<CausalLM> synthetic_causal_lm(const perf::ModelShape& shape, ThreadPool& pool,
                                              const latentserve::ModelOptions& options) {
  const ModelConfig config = ModelConfig::from_json(nlohmann::json::parse(perf::preset_config_json(shape)), shape.name);
  return build_causal_lm(config, std::make_unique<SyntheticWeights>(DType::BF16, 1234), pool, options);
}

latentserve::ModelOptions ModelArgs::model_options() const {
  latentserve::ModelOptions o;
  if (attention == "auto")
    o.mla_path = MlaPath::Auto;
  else if (attention == "naive")
    o.mla_path = MlaPath::Naive;
  else if (attention == "absorbed")
    o.mla_path = MlaPath::Absorbed;
  else
    fail("--attention: expected auto, naive or absorbed, found '{}'", attention);
  if (device != "cpu" && device != "cuda") fail("--device: expected cpu or cuda, found '{}'", device);
  if (gpu < 0) fail("--gpu: expected a GPU ordinal >= 0, found {}", gpu);
  o.device = device;
  o.device_ordinal = gpu;
  o.cuda_graphs = !enforce_eager;
  if (tensor_parallel_size < 1) fail("--tensor-parallel-size: expected >= 1, found {}", tensor_parallel_size);
  o.tensor_parallel_size = tensor_parallel_size;
  return o;
}

cpu::KvCacheOptions ModelArgs::kv_options() const {
  cpu::KvCacheOptions o;
  o.dtype = cpu::parse_kv_cache_dtype(kv_cache_dtype);
  o.scale = cpu::parse_kv_scale_granularity(!kv_scale.empty() ? kv_scale : device == "cuda" ? "per-head" : "per-block");
  return o;
}

void PromptArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--tokens", tokens, "comma-separated prompt token ids");
  cmd->add_option("--prompt", prompt, "prompt text, encoded with the model's tokenizer.json");
}

std::vector<int32_t> PromptArgs::ids(const std::string& model_dir) const {
  if (tokens.empty() == prompt.empty()) fail("give exactly one of --tokens and --prompt");
  if (!tokens.empty()) return parse_token_list(tokens, "--tokens");
  return tokenizer::Tokenizer::from_file(model_dir + "/tokenizer.json").encode(prompt);
}

std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0 || value > INT32_MAX)
      fail("{}: expected a comma-separated list of non-negative token ids, found '{}' at entry {}", flag, item,
           ids.size());
    ids.push_back(int32_t(value));
    begin = end + 1;
  }
  return ids;
}

std::string format_float(float value) { return fmt::format("{}", value); }

}  // namespace latentserve::cli
