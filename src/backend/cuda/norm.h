#pragma once
// RMSNorm on the GPU, with the residual stream in f32 (as the CPU path keeps it) and the
// normed output in bf16 for the next GEMM. rms is taken over f32 values, eps inside the sqrt:
//   rms_norm:      out = bf16(residual / sqrt(mean(residual^2) + eps) * weight)
//   add_rms_norm:  residual += delta (bf16 -> f32 add), then out = rms_norm(residual)
//   rms_norm_heads_inplace: Qwen3's q/k norm, per head of head_dim elements, in place (bf16).
// One CTA per row (256 threads; a 4096 row is 16 elements per thread, held in registers
// between the reduction and the scale, so the row is read once); 16-byte loads when
// dim % 8 == 0 and the pointers are 16-byte aligned, a scalar two-pass kernel otherwise.
// Every element of `out` is written. No host synchronisation (graph-capturable).
#include <cuda_runtime.h>

#include <cstdint>

namespace latentserve::cuda {

// residual: f32 [n_rows, dim]; weight: bf16 [dim]; out: bf16 [n_rows, dim]
void rms_norm(const float* residual, const void* weight, void* out, int n_rows, int dim, float eps, cudaStream_t s);
// residual: f32 [n_rows, dim] (updated); delta: bf16 [n_rows, dim]; weight: bf16 [dim]; out: bf16 [n_rows, dim]
void add_rms_norm(float* residual, const void* delta, const void* weight, void* out, int n_rows, int dim, float eps,
                  cudaStream_t s);
// x: bf16 [n_rows, row_stride elements], heads [n_heads, head_dim] at the start of each row (the
// rest of the row is untouched); weight: bf16 [head_dim]. One warp per head.
void rms_norm_heads_inplace(void* x, int64_t row_stride, int n_rows, int n_heads, int head_dim, const void* weight,
                            float eps, cudaStream_t s);

}  // namespace latentserve::cuda
