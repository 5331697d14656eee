#pragma once
// CausalLM: what the engine needs from any architecture.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "attention/attention_spec.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "core/thread_pool.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace latentserve {

// How one logits row picks its token on the model's device (backend/cuda/sampling.h): the
// Sampler's temperature / top-k / top-p / min-p filters, in f32, and the uniform draw the
// host Sampler would have taken from the request's RNG stream. temperature 0: greedy.
struct TokenChoice {
  float temperature = 0.0f;
  int32_t top_k = 0;     // 0 or -1: off
  float top_p = 1.0f;    // 1: off
  float min_p = 0.0f;    // 0: off
  double uniform = 0.0;  // in [0, 1)
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual AttentionSpec attention_spec() const = 0;
  int64_t n_layer() const { return config().n_layer; }
  int64_t vocab_size() const { return config().vocab_size; }

  // Where the model computes: "cpu" or "cuda".
  virtual std::string_view device() const { return "cpu"; }

  // The KV cache memory this model's forward reads and writes (default: the CPU cache),
  // and the bytes one block of it takes in every layer (rows and scales), for sizing.
  virtual std::unique_ptr<KvCacheMemory> make_kv_cache(int64_t n_blocks, int64_t block_size_tokens,
                                                       const cpu::KvCacheOptions& options) const;
  virtual int64_t kv_block_bytes(int64_t block_size_tokens, const cpu::KvCacheOptions& options) const;

  // A GPU model reserves its activation memory for steps of up to these sizes and returns
  // the bytes left for the KV cache under --gpu-memory-utilization (weights, activations
  // and a reserve counted). A CPU model returns -1: the caller's own budget stands.
  virtual int64_t plan_device_memory(int64_t max_batched_tokens, int64_t max_num_seqs, double gpu_memory_utilization) {
    (void)max_batched_tokens, (void)max_num_seqs, (void)gpu_memory_utilization;
    return -1;
  }

  // Runs the batch: writes each new token's K/V into its slot of `kv` (made by
  // make_kv_cache), reads the context through the block tables, and writes
  // logits: [batch.logits_indices.size(), vocab_size] (host memory).
  virtual void forward(const ForwardBatch& batch, KvCacheMemory& kv, float* logits) = 0;

  // The next token of each logits row, chosen by choices[row] (empty: every row greedy):
  // next_tokens[batch.logits_indices.size()]. A GPU model chooses on the device, so logits
  // never cross to the host; the default runs forward() and takes the host argmax (lowest id
  // on ties), and takes greedy rows only (the engine's Sampler samples for host models).
  virtual void forward_choose(const ForwardBatch& batch, KvCacheMemory& kv, std::span<const TokenChoice> choices,
                              int32_t* next_tokens);

 protected:
  // Error unless choices is empty or holds one entry per logits row of batch.
  static void check_choices(const ForwardBatch& batch, std::span<const TokenChoice> choices);
};

}  // namespace latentserve
