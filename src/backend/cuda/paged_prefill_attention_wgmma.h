#pragma once
// The wgmma (sm_90a) prefill attention kernels behind PrefillKernelVariant::Wgmma and WgmmaM256: head_dim 128,
// bf16 or FP8 caches (the launcher in paged_prefill_attention.cu falls back to W8M2 otherwise). Design
// and arithmetic: docs/cuda-prefill-attention.md, "The wgmma kernel". nvcc-safe header.
#include <cuda_runtime.h>

#include "backend/cuda/paged_prefill_attention.h"

namespace latentserve::cuda {

// True when the wgmma kernels serve these parameters (head_dim 128; bf16 or FP8 K/V).
bool prefill_wgmma_supported(const PagedPrefillParams& p);

// Launches the wgmma kernel on `stream` with query tiles of `query_rows` (128: 128 x 128-key
// tiles; 256: 256 x 64-key tiles, half the K/V bytes per FLOP); p must be validated and supported.
void launch_prefill_wgmma(const PagedPrefillParams& p, int query_rows, cudaStream_t stream);
// The rows per CTA of launch_prefill_wgmma(p, query_rows, ...).
int prefill_wgmma_query_tile(int query_rows);

// Test helper for the kernel's building blocks, one warpgroup on one tile:
//   s[64, 128] = q[64, 128] k[128, 128]^T               (f32; wgmma with both operands in shared memory)
//   o[64, 128] = bf16(s) v[128, 128]                    (f32; P from registers, V N-major in shared memory)
// q, k, v: bf16 row-major device arrays; s, o: f32 device arrays. The kernel stores the tiles in
// the 128-byte swizzled layout the attention kernel uses (wgmma.cuh).
void wgmma_attention_tile_probe(const void* q, const void* k, const void* v, float* s, float* o,
                                cudaStream_t stream);

}  // namespace latentserve::cuda
