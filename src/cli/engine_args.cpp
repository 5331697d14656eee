#include "cli/engine_args.h"

#include <fmt/format.h>

#include "core/error.h"

namespace latentserve::cli {

void EngineArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--max-num-seqs", max_num_seqs, "requests running at once");
  cmd->add_option("--kv-cache-mb", kv_cache_mb,
                  "KV cache memory in MiB (default 1024 on cpu; on cuda, what --gpu-memory-utilization leaves)");
  cmd->add_flag("--no-enable-prefix-caching", no_prefix_caching, "turn prefix caching off");
  cmd->add_option("--max-model-len", max_model_len,
                  "prompt + completion tokens per request (default: config.json's max_position_embeddings)");
}

EngineConfig EngineArgs::engine_config(CausalLM& model, const ModelArgs& m) const {
  const int64_t model_len = model.config().max_position_embeddings;
  if (max_model_len < 0 || (model_len > 0 && max_model_len > model_len))
    fail("--max-model-len: expected 0 (the model's) up to max_position_embeddings {}, found {}", model_len, max_model_len);
  const int64_t kv_cache_mb_or_auto = kv_cache_mb >= 0 ? kv_cache_mb : m.device == "cuda" ? 0 : 1024;
  EngineConfig config;
  config.block_size_tokens = m.block_size;
  config.kv_cache_bytes = kv_cache_mb_or_auto << 20;
  if (kv_cache_mb_or_auto == 0) {  // a device model sizes the cache from what the GPU has left
    const int64_t budget = model.plan_device_memory(m.max_batched_tokens, max_num_seqs, m.gpu_memory_utilization);
    if (budget < 0) fail("--kv-cache-mb 0 (size from the device) needs --device cuda; on the CPU give the MiB");
    config.kv_cache_bytes = budget;
    fmt::print(stderr, "KV cache: {:.2f} GiB of device memory (--gpu-memory-utilization {})\n",
               double(budget) / double(1 << 30), m.gpu_memory_utilization);
  }
  config.enable_prefix_caching = !no_prefix_caching;
  config.kv_options = m.kv_options();
  config.scheduler.max_num_seqs = max_num_seqs;
  config.scheduler.max_num_batched_tokens = m.max_batched_tokens;
  config.scheduler.max_model_len = max_model_len > 0 ? max_model_len : model_len;
  return config;
}

}  // namespace latentserve::cli
