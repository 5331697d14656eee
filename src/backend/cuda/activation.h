#pragma once
// SwiGLU on the GPU: out = silu(gate) * up, computed in f32, over the [gate | up] halves a
// fused gate_up GEMM writes. Memory-bound: 16-byte loads and stores (8 bf16) when inter % 8 == 0
// and the pointers are 16-byte aligned, scalar otherwise.
#include <cuda_runtime.h>

#include <cstdint>

namespace latentserve::cuda {

// gate_up: bf16 [n_rows, 2 * inter] ([gate | up] per row); out: bf16 [n_rows, inter]
// out[r, i] = bf16( g / (1 + exp(-g)) * u ),  g = gate_up[r, i], u = gate_up[r, inter + i]  (f32)
void silu_mul(const void* gate_up, void* out, int n_rows, int inter, cudaStream_t s);

// y: f32 [m, n] += bias: bf16 [n] per column. Gemm's fallback when cuBLASLt has no BIAS epilogue for
// an f32 output with a bf16 bias (backend/cuda/gemm.cpp).
void add_bias_f32(float* y, const void* bias, int64_t m, int64_t n, cudaStream_t s);

}  // namespace latentserve::cuda
