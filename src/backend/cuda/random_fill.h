#pragma once
// Deterministic random fills on the device, for synthetic weights and benchmark KV caches:
// element i of a fill gets a value from a counter-based hash of (seed, i), so the same seed
// gives the same tensor on any GPU and nothing crosses from the host.
#include <cuda_runtime.h>

#include <cstdint>

namespace latentserve::cuda {

// x: bf16 [n], x[i] ~ U(center - half_width, center + half_width).
void fill_uniform_bf16(void* x, int64_t n, float center, float half_width, uint64_t seed, cudaStream_t s);
// x: e4m3fn codes [n] of values ~ U(-half_width, half_width) (finite, no NaN codes).
void fill_uniform_fp8_e4m3(void* x, int64_t n, float half_width, uint64_t seed, cudaStream_t s);

}  // namespace latentserve::cuda
