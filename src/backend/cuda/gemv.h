#pragma once
// Skinny GEMM for decode (a few rows of activations against a large weight matrix):
//   y[m, n] = x[m, k] · w[n, k]^T (+ bias[n]),  1 <= m <= kGemvMaxRows,  bf16 in, bf16 or f32 out, f32 accumulate.
// Weight-bandwidth bound: every weight byte is read once with 16-byte loads, each warp
// works on 4 rows of w at once so that each x chunk it loads (from L1/L2: x is tiny) feeds
// 4 rows. cuBLASLt's kernels for m this small leave bandwidth on the table
// (bench/bench_cuda_kernels.cpp measures both). Needs k % 8 == 0 and 16-byte aligned rows.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/rope_kv_write.h"

namespace latentserve::cuda {

inline constexpr int kGemvMaxRows = 4;

// Rows of w each warp works on at once (x reuse), 16-byte loads per lane in flight per row, and
// s4: the 4 warps of a CTA share its rows, each reading a quarter of k (4x the warps in flight
// for a matrix with few rows: o and q|k|v of an 8B model give 1024-1536 warps unsplit, ~8 an SM).
enum class GemvConfig { Rows4Unroll4, Rows4Unroll8, Rows2Unroll8, Rows1Unroll8, Rows4Unroll4Split4, Rows2Unroll8Split4 };
inline constexpr GemvConfig kGemvConfigs[] = {GemvConfig::Rows4Unroll4,       GemvConfig::Rows4Unroll8,
                                              GemvConfig::Rows2Unroll8,       GemvConfig::Rows1Unroll8,
                                              GemvConfig::Rows4Unroll4Split4, GemvConfig::Rows2Unroll8Split4};
const char* gemv_config_name(GemvConfig config);
int gemv_config_rows(GemvConfig config);  // rows of w per warp: 4, 2 or 1

// Whether gemv_bf16 takes this shape and these pointers.
bool gemv_supported(const void* x, const void* w, const void* y, int64_t m, int64_t k);
// Launched with programmatic dependent launch: its first weight loads overlap the tail of the
// kernel before it (which should execute griddepcontrol.launch_dependents early).
void gemv_bf16(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias,
               cudaStream_t s, GemvConfig config = GemvConfig::Rows4Unroll8);

// The decode step's kernels around a gemv, fused into it (a batch-1 step is a chain of short
// kernels, and each boundary can leave HBM idle for a few microseconds):
// - norm in front (norm_residual set; x is not read): RMSNorm folded into the product,
//   y = (1 / rms(r)) * sum_k w_k (r_k g_k) with rms(r) = sqrt(mean(r^2) + eps) over the f32
//   residual row r and g = norm_weight. Unlike norm.h's rms_norm followed by the gemv, the
//   normed row is not rounded to bf16 (it never exists): closer to the f32 maths, not bit-equal;
// - then one of: y[m, n] = bf16(product + b) (store); with swiglu, w's rows are [gate | up]
//   (n even) and y[m, n / 2] = bf16(silu(bf16(gate)) * bf16(up)), as activation.h's silu_mul
//   of the stored product rounds;
// - or, with rope_kv_write, y is a q|k|v row and the epilogue does rope_and_write_kv(rope_kv)
//   (rope_kv_write.h) on it: each warp's rows are whole rotated pairs (for neox, rows i and
//   i + rotary_dim / 2 of a head side by side), so it rotates y = bf16(product + b) in
//   registers, stores q and k rotated into y and this step's K and V into their paged slots:
//   bit-equal to the norm -> store mode followed by rope_and_write_kv, one kernel fewer. y must
//   be rope_kv.qkv, with rope_kv.qkv_token_stride = n = (n_head + 2 n_head_kv) head_dim and
//   rope_kv.n_tokens = m. It cannot calibrate FP8 scales (calibrate_kv_scales reads the product
//   before the rotation): a caller whose cache needs calibration runs the separate kernels;
// - or, without a norm, add_to_residual[m, n] (f32) += bf16(x w^T + b), as add_rms_norm adds a
//   stored delta (y is not written): bit-equal to the gemv followed by that add.
struct GemvFusion {
  const float* norm_residual = nullptr;  // f32 [m, k]
  const void* norm_weight = nullptr;     // bf16 [k]
  float norm_eps = 0.0f;
  bool swiglu = false;
  bool rope_kv_write = false;  // with a norm in front: RoPE + the K/V write behind (rope_kv)
  RopeKvWriteParams rope_kv{};
  float* add_to_residual = nullptr;  // f32 [m, n]
};
// SwiGLU and the RoPE epilogue need a configuration with an even number of rows per warp (not r1u8).
void gemv_bf16_fused(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, const void* bias,
                     const GemvFusion& fusion, cudaStream_t s, GemvConfig config = GemvConfig::Rows4Unroll4);

}  // namespace latentserve::cuda
