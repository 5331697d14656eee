#pragma once
// Skinny GEMM for decode (a few rows of activations against a large weight matrix):
//   y[m, n] = x[m, k] · w[n, k]^T (+ bias[n]),  1 <= m <= kGemvMaxRows,  bf16 in, bf16 or f32 out, f32 accumulate.
// Weight-bandwidth bound: every weight byte is read once with 16-byte loads, each warp
// works on 4 rows of w at once so that each x chunk it loads (from L1/L2: x is tiny) feeds
// 4 rows. cuBLASLt's kernels for m this small leave bandwidth on the table
// (bench/bench_cuda_kernels.cpp measures both). Needs k % 8 == 0 and 16-byte aligned rows.
#include <cuda_runtime.h>

#include <cstdint>

namespace latentserve::cuda {

inline constexpr int kGemvMaxRows = 4;

// Rows of w each warp works on at once (x reuse) and 16-byte loads per lane in flight per row.
enum class GemvConfig { Rows4Unroll4, Rows4Unroll8, Rows2Unroll8, Rows1Unroll8 };
inline constexpr GemvConfig kGemvConfigs[] = {GemvConfig::Rows4Unroll4, GemvConfig::Rows4Unroll8,
                                              GemvConfig::Rows2Unroll8, GemvConfig::Rows1Unroll8};
const char* gemv_config_name(GemvConfig config);

// Whether gemv_bf16 takes this shape and these pointers.
bool gemv_supported(const void* x, const void* w, const void* y, int64_t m, int64_t k);
// Launched with programmatic dependent launch: its first weight loads overlap the tail of the
// kernel before it (which should execute griddepcontrol.launch_dependents early).
void gemv_bf16(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias,
               cudaStream_t s, GemvConfig config = GemvConfig::Rows4Unroll8);

}  // namespace latentserve::cuda
