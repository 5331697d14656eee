#include "perf/roofline.h"

#include <algorithm>

namespace latentserve::perf {

std::string StepCost::dominant_term() const {
  if (compute_ms > memory_ms) return "compute";
  return weight_bytes >= kv_bytes ? "weights" : "kv";
}

StepCost roofline(double weight_bytes, double kv_bytes, double flops, const HardwareSpec& hw) {
  StepCost c;
  c.weight_bytes = weight_bytes;
  c.kv_bytes = kv_bytes;
  c.flops = flops;
  c.memory_ms = (weight_bytes + kv_bytes) / hw.memory_bandwidth_bytes_per_s * 1e3;
  c.compute_ms = flops / hw.peak_flops_per_s * 1e3;
  c.time_ms = std::max(c.memory_ms, c.compute_ms);
  return c;
}

double decode_attention_flops_per_context_token(const AttentionSpec& a) {
  if (a.kind == AttentionKind::MLA) return 2.0 * double(a.n_head) * double(2 * a.kv_lora_rank + a.qk_rope_head_dim);
  return 2.0 * double(a.n_head) * double(a.head_dim_qk + a.head_dim_v);
}

StepCost decode_step(const ModelShape& shape, const HardwareSpec& hw, int64_t batch, int64_t context_tokens,
                     const TpKvLayout& layout, double kv_batch_share) {
  const double tp = double(layout.tp), B = double(batch), ctx = double(context_tokens);
  const double weight_bytes = params_read_per_step(shape, B) * double(dtype_size_bytes(shape.weight_dtype)) / tp;
  const double kv_bytes = B * kv_batch_share * ctx * double(layout.bytes_per_token_per_gpu);
  const double linear_flops = 2.0 * double(count_params(shape).active_per_token) * B;
  const double attention_flops =
      B * ctx * double(shape.n_layer) * decode_attention_flops_per_context_token(shape.attention);
  return roofline(weight_bytes, kv_bytes, (linear_flops + attention_flops) / tp, hw);
}

StepCost prefill(const ModelShape& shape, const HardwareSpec& hw, int64_t prompt_tokens, const TpKvLayout& layout) {
  const double tp = double(layout.tp), L = double(prompt_tokens);
  const AttentionSpec& a = shape.attention;
  const double weight_bytes = params_read_per_step(shape, L) * double(dtype_size_bytes(shape.weight_dtype)) / tp;
  const double kv_bytes = L * double(layout.bytes_per_token_per_gpu);
  const double linear_flops = 2.0 * double(count_params(shape).active_per_token) * L;
  // Prefill attends with full heads (MLA: K and V materialised, d_qk = nope + rope).
  const double attention_flops = double(shape.n_layer) * double(a.n_head) * double(a.head_dim_qk + a.head_dim_v) * L * (L + 1);
  return roofline(weight_bytes, kv_bytes, (linear_flops + attention_flops) / tp, hw);
}

}  // namespace latentserve::perf
