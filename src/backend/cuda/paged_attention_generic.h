#pragma once
// The portable paged attention kernel: any ragged batch (prefill chunks and decode tokens
// mixed), any even head_dim up to 256, bf16 or e4m3 KV. One warp per (query token, query
// head) walks that query's keys with an online softmax in f32: simple and slow, it is the
// GPU path for shapes the fast kernels (paged_decode_attention, paged_prefill_attention:
// head_dim 64 and 128) do not take, e.g. the tiny test checkpoints (head_dim 16), and a
// second opinion on them. Same parameters and semantics as PagedPrefillParams.
#include <cuda_runtime.h>

#include "backend/cuda/paged_prefill_attention.h"

namespace latentserve::cuda {

void paged_attention_generic(const PagedPrefillParams& p, cudaStream_t stream);

}  // namespace latentserve::cuda
