#pragma once
// Decode attention (one new query token per sequence) over the paged KV cache, for MHA, GQA
// and MQA, with a bf16 or e4m3 (FP8) cache. Memory-bound by design: every K/V byte of a KV
// group is read once, by one CTA that processes all query heads of that group together on
// tensor cores (mma.sync m16n8k16), and the context is split into chunks (split-KV) so that
// even a small batch fills the GPU; a second small kernel merges the chunks' partial softmax
// states. Design, bytes and FLOPs: docs/cuda-decode-attention.md.
//
// Semantics (the CPU reference: backend/cpu/paged_attention.h, reference/attention_reference.h):
//   slot(s, pos) = block_tables[s * max_blocks_per_seq + pos / block_size] * block_size + pos % block_size
//   K of KV head h at pos: kv.k + (slot * n_head_kv + h) * head_dim elements (V likewise)
//   query head qh attends with KV head qh / (n_head / n_head_kv), over the keys
//   [max(0, seq_len - sliding_window), seq_len) (all of [0, seq_len) when sliding_window == 0)
//   out = sum_i p_i v_i / sum_i p_i,  p_i = exp(softmax_scale * q.k_i - max), f32, rounded to bf16
//   FP8: value = e4m3_to_f32(code) * scale[h * scale_head_stride], dequantised in registers.
// seq_len 0 (a padded row) writes zeros; seq_len < 0, > max_seq_len_bound or > max_blocks_per_seq *
// block_size writes NaN (a loud failure instead of a silently truncated context or a read past
// the table). No host synchronisation: capturable in a CUDA graph.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kv_cache_layout.h"

namespace latentserve::cuda {

// Compiled kernel variants (docs/cuda-decode-attention.md, "Variants"). Base is the measured,
// tested kernel and the default; the others are candidates the benchmark sweeps and the tests run.
//   Base          128 threads, 3-4 cp.async stages, separate merge kernel (the kernel as first measured)
//   Pdl           Base + griddepcontrol.launch_dependents at the start of both kernels (the next
//                 kernel's launch hides under this one's tail)
//   Prologue      Pdl + a prologue whose q loads are in flight with seq_len's, the chunk's block
//                 ids right behind it (two global round trips before the first K/V copy, not three)
//   Fused         Prologue + the merge fused into the split kernel: the last CTA of a (sequence, KV
//                 head) merges the partials (atomic counter at the end of the workspace, reset by that
//                 CTA); a sequence whose live context is one chunk writes its output directly
//   FusedW8       Fused with 256 threads (8 warps), one CTA per SM, stages filling ~227 KB
//   FusedStages   Fused with as many stages as still fit two CTAs per SM (more bytes in flight for
//                 FP8 and head_dim 64; the same 3 stages at bf16 / head_dim 128)
//   FusedFp8Mixed Fused; FP8 V converted with integer ops (e4m3 bits -> f16 bits, x2^-8 folded into
//                 v_scale) so K (cvt.e4m3x2) and V (ALU) conversions run on different pipes
//   FusedFp8Alu   Fused; FP8 K and V both converted with integer ops
//   FusedStagesFp8Mixed  FusedStages + FusedFp8Mixed
//   StreamK       one 1-D grid (target_ctas, default 2 per SM) over all the step's K/V tiles in
//                 (sequence, KV head, tile) order, an equal range per CTA, the pipeline unbroken
//                 across pairs; per-warp partials merged by the last CTA of each pair (counters
//                 as Fused). Groups <= 16 and batches <= 256; other steps run Fused.
//   FusedFill3    Fused with the stages (<= 4) that fit three CTAs per SM (bf16 hd128: 2), at most
//                 170 registers: 12 warps per SM instead of 8 to hide each CTA's barrier waits.
//                 Groups <= 16 (one m-tile); larger groups run Fused.
//   FusedBulk     Fused with each K/V row copied by one TMA bulk copy (cp.async.bulk) that
//                 completes on a per-stage mbarrier, instead of 16-byte cp.async per thread:
//                 one row address and one copy per thread per tile instead of 8 and 16.
//   FusedLazy     Fused with a lazy online softmax: a row's running max moves only when a tile's
//                 max exceeds it by more than 8 (log2 units; p <= 256), and a warp whose rows all
//                 kept theirs skips rescaling its accumulators (FlashAttention-4's trick)
//   FusedFill3Lazy  FusedFill3 with the same lazy softmax
// For a bf16 cache the three Fp8 variants run exactly the Fused / FusedStages kernels.
enum class PagedDecodeKernel : int {
  Base = 0,
  Pdl,
  Prologue,
  Fused,
  FusedW8,
  FusedStages,
  FusedFp8Mixed,
  FusedFp8Alu,
  FusedStagesFp8Mixed,
  StreamK,
  FusedFill3,
  FusedBulk,
  FusedLazy,
  FusedFill3Lazy,
  kCount
};
const char* paged_decode_kernel_name(PagedDecodeKernel kernel);
bool paged_decode_kernel_is_fused(PagedDecodeKernel kernel);
bool paged_decode_kernel_fp8_only(PagedDecodeKernel kernel);  // differs from another variant only for FP8

// Run-time knobs; the defaults are the current behaviour.
struct PagedDecodeTuning {
  PagedDecodeKernel kernel = PagedDecodeKernel::Base;
  int target_ctas = 0;   // > 0: the CTA count the chunk planner aims at (default 528 = 4 x 132; 132 for <= 64 pairs)
  int chunk_tokens = 0;  // > 0: fixed chunk, a multiple of the variant's tile (64, or 128 for FusedW8 at group <= 16), <= 1024
                         // (StreamK: must be 0; its CTAs' ranges follow from the step's lengths)
  // The grid (n_splits per (sequence, KV head)) is planned from max_seq_len_bound, and by default
  // split i covers [i * chunk, (i + 1) * chunk) at every length (a sequence half as long as the
  // bound leaves half of its CTAs without keys). true: each sequence's chunks are sized in the
  // kernel from its length (its live keys over n_splits, rounded up to the tile, never below the
  // planned floor), so every CTA has keys at any length. Measured on par or slower (H100,
  // 2026-12-05, docs/cuda-decode-attention.md): a tested variant, not the default. Needs
  // chunk_tokens 0.
  bool chunks_from_lengths = false;
};

struct PagedDecodeParams {
  const void* q;          // bf16 [n_seqs, n_head, head_dim]; row of sequence s at q + s*q_seq_stride elements
  int64_t q_seq_stride;   // elements (>= n_head*head_dim); the model passes its fused qkv buffer
  DeviceKvLayer kv;       // one layer: k,v [n_slots, n_head_kv, head_dim], bf16 or e4m3 + scales (kv_cache_layout.h)
  void* out;              // bf16 [n_seqs, n_head, head_dim], contiguous
  const int32_t* seq_lens;      // [n_seqs] context length incl. the new token (device); 0 = padded row: write zeros
  const int32_t* block_tables;  // [n_seqs, max_blocks_per_seq] block ids (device)
  int n_seqs = 0, max_blocks_per_seq = 0, block_size = 0;  // block_size: tokens per block, power of two in [8, 256]
  int n_head = 0, n_head_kv = 0, head_dim = 0;             // head_dim 64 or 128; n_head % n_head_kv == 0
  float softmax_scale = 0;
  int sliding_window = 0;     // > 0: the query at position p = seq_len-1 sees keys (p - window, p]
  int max_seq_len_bound = 0;  // host-known upper bound of seq_lens: sizes the grid (so a captured graph stays valid as lengths grow up to it)
  void* workspace = nullptr;  // device scratch of paged_decode_workspace_bytes(...) bytes (split-KV partials)
  size_t workspace_bytes = 0;
  PagedDecodeTuning tuning;   // which compiled variant and chunk plan (default: Base, planned chunks)
};
// Requirements the launcher checks (each failure throws Error naming the field):
//   q, out, kv.k, kv.v, seq_lens, block_tables, workspace non-null; q, out, kv.k, kv.v, workspace
//   16-byte aligned; q_seq_stride >= n_head*head_dim and a multiple of 8; n_head / n_head_kv <= 64;
//   max_blocks_per_seq >= 1; max_seq_len_bound >= 1; FP8: k_scale, v_scale non-null; tuning: a
//   compiled kernel, target_ctas >= 0, chunk_tokens 0 or a multiple of the tile <= 1024; fused
//   variants: workspace_bytes >= partials + 4 * n_seqs * n_head_kv (and counters zeroed once,
//   paged_decode_workspace_init).

// Bytes of workspace: an upper bound over every n_head_kv and KV dtype (for the given tuning's
// chunk rule), and monotone in n_seqs and max_seq_len_bound, so a workspace sized for the largest
// batch and bound serves every smaller step (allocate it once; at most ~18 MB beyond
// n_seqs*n_head*ceil(bound/1024) partials). Layout: partials from the start; the fused variants'
// merge counters (one uint32 per (sequence, KV head)) in the last round_up(4*n_seqs*n_head, 256)
// bytes, indexed down from the end, so their place does not move with the step's batch.
size_t paged_decode_workspace_bytes(int n_seqs, int n_head, int head_dim, int max_seq_len_bound,
                                    const PagedDecodeTuning& tuning = {});
// The fused variants need their counters zero before their first launch on a workspace (each
// launch leaves them zero again, so captured graphs replay correctly): call this once after
// allocating (stream-ordered memset of the counter tail; partials are left as they are).
// n_seqs, n_head: those the workspace was sized for.
void paged_decode_workspace_init(void* workspace, size_t workspace_bytes, int n_seqs, int n_head,
                                 cudaStream_t stream);

void paged_decode_attention(const PagedDecodeParams& p, cudaStream_t stream);

// The launch shape paged_decode_attention picks (host arithmetic only; for benchmarks and docs).
struct PagedDecodePlan {
  int chunk_tokens = 0;  // context tokens per CTA at the bound (a multiple of the key tile)
  int length_chunk_min = 0;  // > 0: chunks sized from each length, at least this many tokens; 0: chunk_tokens for every length
  int n_splits = 0;      // CTAs per (sequence, KV head): ceil(max_seq_len_bound / chunk_tokens)
  int n_ctas = 0;        // n_splits * n_head_kv * n_seqs
  size_t workspace_bytes = 0;  // what this launch uses (<= paged_decode_workspace_bytes); fused: partials + counters
  // the compiled kernel this launch runs
  int threads = 0, tile_keys = 0, stages = 0, smem_bytes = 0;
  bool fused = false;
  bool stream_k = false;  // StreamK ran (chunk_tokens: tokens per CTA at the bound; n_splits 0)
};
PagedDecodePlan paged_decode_plan(int n_seqs, int n_head, int n_head_kv, int head_dim, KvDtype dtype,
                                  int max_seq_len_bound, const PagedDecodeTuning& tuning = {});

// The grid bound a graph-captured decode step plans for when its longest sequence has max_len
// tokens: the smallest m * 2^e >= max(max_len, 512) with m an integer in [steps, 2 * steps), so
// steps_per_octave bounds a doubling of the length (1: the powers of two; 4: 512, 640, 768, 896,
// 1024, 1280, ...). The planned chunks are sized for the bound, so the longest sequence covers at
// least steps / (steps + 1) of the grid's keys (a length just above a power of two left half of
// a pow2 grid idle, and its live CTAs each with twice the keys). Needs steps_per_octave in
// [1, kDecodeContextBucketsMaxSteps].
inline constexpr int kDecodeContextBucketsMaxSteps = 64;
int64_t decode_context_bucket(int64_t max_len, int steps_per_octave);
// The model's default: powers of two. Four steps an octave measured no faster end to end (H100,
// 2026-12-07, docs/cuda-decode-attention.md "Finer context buckets") and captures 4x the graphs.
inline constexpr int kDecodeContextBucketsPerOctave = 1;

}  // namespace latentserve::cuda
