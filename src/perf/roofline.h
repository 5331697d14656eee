#pragma once
// The roofline: a step takes max(bytes / bandwidth, FLOPs / peak). Here are the bytes
// and FLOPs of one decode step and of one prefill, per GPU, and that time.
#include <cstdint>
#include <string>

#include "perf/gpu_specs.h"
#include "perf/kv_calculator.h"
#include "perf/model_shape.h"

namespace latentserve::perf {

struct StepCost {
  double weight_bytes = 0;  // per GPU
  double kv_bytes = 0;      // per GPU: KV read (decode) or written (prefill)
  double flops = 0;         // per GPU
  double memory_ms = 0;     // (weight_bytes + kv_bytes) / bandwidth
  double compute_ms = 0;    // flops / peak
  double time_ms = 0;       // max of the two
  double bytes() const { return weight_bytes + kv_bytes; }
  double arithmetic_intensity_flop_per_byte() const { return flops / bytes(); }
  // "weights", "kv" (memory-bound, by the larger byte term) or "compute".
  std::string dominant_term() const;
};

// Time of `bytes` and `flops` on `hw`.
StepCost roofline(double weight_bytes, double kv_bytes, double flops, const HardwareSpec& hw);

// FLOPs of attention for one query token against one context token in one layer:
// standard 2 * n_head * (d_qk + d_v); MLA (absorbed decode: attend in latent space)
// 2 * n_head * (2 * kv_lora_rank + qk_rope_head_dim).
double decode_attention_flops_per_context_token(const AttentionSpec& spec);

// One decode step: `batch` sequences each with `context_tokens` in the cache produce one
// token each. Weights split evenly over tp ranks, the KV as `layout` says; attention FLOPs
// split by query heads; the KV dtype is in layout.bytes_per_token_per_gpu. `kv_batch_share` < 1 models data-parallel attention (each rank holds
// and attends for that share of the sequences). Communication is not modelled.
StepCost decode_step(const ModelShape& shape, const HardwareSpec& hw, int64_t batch, int64_t context_tokens,
                     const TpKvLayout& layout, double kv_batch_share = 1.0);

// Prefill of one prompt of `prompt_tokens` (TTFT): every token's matmuls plus the causal
// attention term n_layer * n_head * (d_qk + d_v) * L * (L + 1) (quadratic in L), the
// weights read once and the prompt's KV written.
StepCost prefill(const ModelShape& shape, const HardwareSpec& hw, int64_t prompt_tokens, const TpKvLayout& layout);

}  // namespace latentserve::perf
