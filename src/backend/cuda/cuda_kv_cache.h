#pragma once
// CudaKvCache: the paged KV cache in device memory, for standard attention (MHA/GQA/MQA).
// Per layer, the layout of kv_cache_layout.h (slot-major, as the CPU cache, or head-major rows):
//   k, v: [n_blocks * block_size_tokens, n_head_kv, head_dim] (slot-major) or [n_blocks, n_head_kv,
//   block_size_tokens, head_dim] (head-major, the default; LATENTSERVE_CUDA_KV_LAYOUT=slot for the other)
// FP8 scales are static, per-tensor or per-head, and live on the device: they start at 0
// ("uncalibrated") and the model's first write into a layer sets them from the values it
// writes (calibrate_kv_scales, with KvCacheOptions::static_scale_headroom), as the CPU cache
// does. Per-block scales and MLA's latent layout are CPU-only for now: asking for them is an
// Error that says so.
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attention_spec.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kv_cache_layout.h"
#include "backend/kv_cache_memory.h"

namespace latentserve::cuda {

class CudaKvCache final : public KvCacheMemory {
 public:
  // options.dtype: BF16 or F8_E4M3 (F32, the CPU's "auto", is taken as bf16: the GPU
  // kernels read bf16 or fp8 only).
  CudaKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens,
              const cpu::KvCacheOptions& options, cudaStream_t stream);

  // Bytes one block takes in every layer (rows and scales amortised), for sizing the pool.
  static int64_t block_bytes(const AttentionSpec& spec, int64_t n_layer, int64_t block_size_tokens,
                             const cpu::KvCacheOptions& options);

  std::string_view device() const override { return "cuda"; }
  int64_t n_blocks() const override { return n_blocks_; }
  int64_t bytes() const override { return int64_t(rows_.bytes() + scales_.bytes()); }
  // Device-to-device copy of every layer's K/V rows of block src to block dst, on the stream.
  void copy_block(int64_t src_block, int64_t dst_block) override;

  DeviceKvLayer layer(int64_t l) const;
  KvDtype dtype() const { return dtype_; }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t n_layer() const { return n_layer_; }
  float static_scale_headroom() const { return headroom_; }
  // FP8: whether a write has calibrated the static scales yet (the model calibrates on the
  // first write, then never again: later steps and captured graphs skip the pass).
  bool needs_calibration() const { return dtype_ == KvDtype::Fp8E4M3 && !calibrated_; }
  void mark_calibrated() { calibrated_ = true; }

  // Unique over the process (a cache made where a freed one lived gets a new id): what captured
  // decode graphs, which bake in this cache's pointers, check they were captured on.
  uint64_t id() const { return id_; }

  // Benchmarks: every row random (bf16 ~ U(-1, 1); fp8 codes of U(-64, 64) with scales 1/64),
  // so a decode step reads real-looking data without a prefill.
  void fill_random(uint64_t seed);

 private:
  int64_t n_layer_, n_blocks_, block_size_tokens_, n_head_kv_, head_dim_;
  KvDtype dtype_;
  KvLayout layout_;
  int scale_head_stride_ = 0;
  int64_t n_scales_ = 0;  // per layer and side (1 or n_head_kv)
  float headroom_;
  bool calibrated_ = false;
  uint64_t id_;
  cudaStream_t stream_;
  DeviceBuffer rows_;    // [n_layer][k | v][n_slots * n_head_kv * head_dim] elements
  DeviceBuffer scales_;  // [n_layer][k | v][n_scales] f32 (FP8 only)
  int64_t side_bytes() const;
};

// The row order of new caches: HeadMajor, or SlotMajor when LATENTSERVE_CUDA_KV_LAYOUT=slot
// (kv_cache_layout.h; "head" is the default, any other value an Error naming it). Measured:
// docs/cuda-decode-attention.md, "Head-major blocks".
KvLayout default_kv_layout();

// The CUDA cache behind a KvCacheMemory; an Error naming the device otherwise.
CudaKvCache& as_cuda_kv_cache(KvCacheMemory& kv);

}  // namespace latentserve::cuda
