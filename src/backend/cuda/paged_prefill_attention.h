#pragma once
// Causal prefill attention over the paged KV cache for a ragged batch of sequences
// (FlashAttention-2 tiling on tensor cores with f32 accumulate: mma.sync m16n8k16 kernels, and
// wgmma kernels on sm_90a for head_dim 128, the Wgmma variants).
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

// Kernel shapes the launcher can run (docs/cuda-prefill-attention.md, "Variants"). Base is the
// measured, tested default; the others are candidates the benchmark compares in one run. Every
// variant computes the same function and passes the same tests. Names: w<warps>m<16-row MMA tiles
// per warp>[n<key tile>][s<cp.async stages>][gqa: one CTA per KV head][exp: part of exp2 on FMA].
enum class PrefillKernelVariant : int {
  Base = 0,   // 8 warps x 16 rows (128-row tile), Q in registers, 64-key tiles, 3 stages, 1 CTA/SM
  W8M1,       // Base's shape through the variant kernel (control: should time like Base)
  W4M2,       // 4 warps x 32 rows (128-row tile), Q re-read from smem, 64 keys, 2 stages: 96 KiB, 2 CTAs/SM
  W4M2S3,     // W4M2 with 3 stages: 128 KiB, 1 CTA/SM
  W8M2,       // 8 warps x 32 rows (256-row tile), 64 keys, 2 stages: 128 KiB, 1 CTA/SM
  W8M1N128,   // 8 warps x 16 rows, Q in registers, 128-key tiles, 2 stages: 160 KiB, 1 CTA/SM
  W4M2Gqa,    // W4M2 with one CTA per (query tile, KV head): the tile's 128 rows are (query, head of the
              // group) pairs, so each K/V tile is loaded once per group (falls back to W4M2 when group > 128)
  W4M2Exp,    // W4M2 with 1 in 8 of the softmax exp2 on the FMA pipe (degree-3 polynomial), the rest on MUFU
  Wgmma,      // sm_90a warpgroup MMA: 2 warpgroups x 64 rows, 128-key tiles, 3 stages, 1 CTA/SM; head_dim 128,
              // bf16 or FP8 K/V (paged_prefill_attention_wgmma.cu); head_dim 64 runs W8M2
  WgmmaM256,  // Wgmma with 2 warpgroups x 128 rows (256-row tile), 64-key tiles, 5 stages
  kCount
};
constexpr int kPrefillKernelVariantCount = int(PrefillKernelVariant::kCount);
// "base", "w8m1", "w4m2", ...; nullptr for a value out of range.
const char* prefill_kernel_variant_name(PrefillKernelVariant v);
// The variant called `name`; false when there is none.
bool parse_prefill_kernel_variant(const char* name, PrefillKernelVariant* out);

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
  PrefillKernelVariant variant = PrefillKernelVariant::Base;  // kernel shape (same result); see above
};

// Validates every field (throws latentserve::Error naming it) and launches on `stream`. No
// host synchronisation, no allocation: capturable in a CUDA graph. Rows of padding (tokens
// past qsl[n_seqs]) are left untouched.
void paged_prefill_attention(const PagedPrefillParams& p, cudaStream_t stream);

// The query tile (rows per CTA) the kernel uses for this head_dim and a bf16 cache: the grid has
// ceil(max_query_len / tile) tiles per (sequence, head). For planners and benchmarks. (The Gqa
// variant's tile holds rows / group queries of group heads each.)
int paged_prefill_query_tile(int head_dim, PrefillKernelVariant variant = PrefillKernelVariant::Base);

// Benchmark helper: the mma.sync ceiling. n_ctas CTAs of 256 threads; each warp issues
// mma_per_warp back-to-back m16n8k16 bf16 MMAs (f32 accumulate) over 8 independent accumulator
// chains in registers, and every thread writes one float to sink[n_ctas * 256] (keeps the work
// alive). FLOPs = n_ctas * 8 * mma_per_warp * 2 * 16 * 8 * 16. mma_per_warp: a multiple of 8.
void mma_sync_peak_probe(int n_ctas, int mma_per_warp, float* sink, cudaStream_t stream);

}  // namespace latentserve::cuda
