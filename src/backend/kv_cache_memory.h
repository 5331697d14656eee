#pragma once
// KvCacheMemory: the memory behind the KV block ids, wherever it lives (host RAM for
// backend/cpu, device memory for backend/cuda). kv/ decides which blocks a sequence
// uses; the engine owns one of these and hands it to the model's forward, which knows
// the concrete type it made (CausalLM::make_kv_cache).
#include <cstdint>
#include <string_view>

namespace latentserve {

class KvCacheMemory {
 public:
  virtual ~KvCacheMemory() = default;
  virtual std::string_view device() const = 0;  // "cpu" or "cuda"
  virtual int64_t n_blocks() const = 0;
  virtual int64_t bytes() const = 0;  // rows and scales, all layers
  // Copies block src's rows (and per-block scales) to block dst in every layer (copy on write).
  virtual void copy_block(int64_t src_block, int64_t dst_block) = 0;
};

}  // namespace latentserve
