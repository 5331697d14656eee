#pragma once
// Causal prefill attention over the paged KV cache for a ragged batch of sequences
// (FlashAttention-2 tiling on tensor cores, mma.sync m16n8k16 bf16 with f32 accumulate).
//
//   out[t, h, :] = softmax_j(scale * q[t, h, :] · k[j, h / group, :]) · v[j, h / group, :]
//
// over the keys j a query may see: causal (j <= its position) and, with a sliding window,
// j > position - window. Sequence s owns query tokens [qsl[s], qsl[s+1]); they are the LAST
// q_len positions of its context (a cached prefix or earlier chunks come first), and every
// key of the context, the new ones included, is already in the cache. MHA, GQA and MQA; bf16
// or FP8 (e4m3) caches with per-head or per-tensor scales. Design and arithmetic:
// docs/cuda-prefill-attention.md. nvcc-safe header (a .cu may include it).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kv_cache_layout.h"

namespace latentserve::cuda {

struct PagedPrefillParams {
  const void* q;            // bf16 [n_tokens, n_head, head_dim]; token t's row at q + t*q_token_stride elements
  int64_t q_token_stride;   // elements (>= n_head*head_dim, a multiple of 8); the model passes its fused qkv buffer
  DeviceKvLayer kv;         // one layer's paged cache (kv_cache_layout.h); the step's new K/V are ALREADY written
  void* out;                // bf16 [n_tokens, n_head, head_dim], contiguous
  const int32_t* query_start_loc;  // [n_seqs + 1] (device): sequence s owns query tokens [qsl[s], qsl[s+1])
  const int32_t* seq_lens;         // [n_seqs] (device): context length after this step; query i of sequence s
                                   // sits at position seq_len - q_len + i
  const int32_t* block_tables;     // [n_seqs, max_blocks_per_seq] (device)
  int n_seqs = 0, n_tokens = 0, max_blocks_per_seq = 0, block_size = 0;  // block_size: power of two in [8, 256]
  int max_query_len = 0;    // host-known max over sequences of q_len: sizes the grid (an underestimate leaves
                            // the rows past it unwritten)
  int n_head = 0, n_head_kv = 0, head_dim = 0;  // head_dim 64 or 128; n_head % n_head_kv == 0
  float softmax_scale = 0;
  int sliding_window = 0;   // > 0: a query at position p sees keys (p - window, p]
};

// Validates every field (throws latentserve::Error naming it) and launches on `stream`. No
// host synchronisation, no allocation: capturable in a CUDA graph. Rows of padding (tokens
// past qsl[n_seqs]) are left untouched.
void paged_prefill_attention(const PagedPrefillParams& p, cudaStream_t stream);

// The query tile (rows per CTA) the kernel uses for this head_dim: the grid has
// ceil(max_query_len / tile) tiles per (sequence, head). For planners and benchmarks.
int paged_prefill_query_tile(int head_dim);

}  // namespace latentserve::cuda
