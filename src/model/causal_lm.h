#pragma once
// CausalLM: what the engine needs from any architecture.
#include <cstdint>
#include <filesystem>
#include <memory>

#include "attention/attention_spec.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "core/thread_pool.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace latentserve {

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual AttentionSpec attention_spec() const = 0;
  int64_t n_layer() const { return config().n_layer; }
  int64_t vocab_size() const { return config().vocab_size; }

  // Runs the batch: writes each new token's K/V into its slot of `kv`, reads the
  // context through the block tables, and writes
  // logits: [batch.logits_indices.size(), vocab_size].
  virtual void forward(const ForwardBatch& batch, cpu::CpuKvCache& kv, float* logits) = 0;
};

}  // namespace latentserve
