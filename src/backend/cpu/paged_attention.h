#pragma once
// Causal attention over a paged KV cache for a ragged batch (any mix of prefill
// chunks and decode tokens), for MHA, GQA and MQA (and MLA's absorbed decode, as MQA over
// the latent row): each K/V row is read once for all heads of a token, tiles of 48 keys
// (spanning blocks), online softmax in f32; a decode token's context is split across the
// threads (split-KV) and the pieces merged. How it is organised: paged_attention.cpp.
// The cache may be F32, BF16 or FP8 (backend/cpu/kv_quant.h): a quantised tile's rows are
// dequantised into a small per-thread buffer as they are read, never into a full-precision
// copy of the cache. On CPUs with AMX, bf16 rows of the MQA / MLA shape go to the tiles as they
// are, at f32 accuracy (paged_attention_amx.h).
#include <cstdint>

#include "backend/cpu/kv_quant.h"
#include "core/thread_pool.h"

namespace latentserve::cpu {

struct PagedAttentionParams {
  const float* q;        // [n_tokens, n_head, head_dim_qk], token stride q_token_stride
  int64_t q_token_stride;
  KvRows k_cache;  // [n_slots] rows (n_slots = n_blocks * block_size); head h at elements [h * head_dim_qk, +head_dim_qk)
  KvRows v_cache;  // [n_slots] rows; head h at elements [h * head_dim_v, +head_dim_v). MLA's absorbed path
                   // reads K and V from one latent row: v_cache = k_cache (n_head_kv == 1), dequantised once
  float* out;            // [n_tokens, n_head, head_dim_v], contiguous
  const int32_t* query_start_loc;  // [n_seqs + 1]
  const int32_t* seq_lens;         // [n_seqs]
  const int32_t* block_tables;     // [n_seqs, max_blocks_per_seq]
  int64_t n_seqs;
  int64_t max_blocks_per_seq;
  int64_t block_size;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim_qk;
  int64_t head_dim_v;
  float softmax_scale;
  int64_t sliding_window = 0;  // > 0: a query at position p sees keys in (p - window, p]
  bool allow_avx512 = true;    // false: the AVX2 kernels even where the CPU has AVX-512 (tests)
  bool allow_amx = true;       // false: no AMX tiles for the gemm shape on bf16 rows (paged_attention_amx.h)
};

void paged_attention(const PagedAttentionParams& p, ThreadPool& pool);

// Whether paged_attention(p) takes the AMX tiles: bf16 K/V, the gemm shape with groups of 16k
// heads, and a CPU (and OS) with AMX-BF16.
bool paged_attention_uses_amx(const PagedAttentionParams& p);

// Stores each new token's K and V rows into its slot of an f32 paged cache (the raw form of
// CpuKvCache::write for F32 caches; models call CpuKvCache::write, which also quantises).
struct WriteKvParams {
  const float* k;  // [n_tokens, n_head_kv * head_dim_qk], token stride k_token_stride
  int64_t k_token_stride;
  const float* v;  // [n_tokens, n_head_kv * head_dim_v], token stride v_token_stride
  int64_t v_token_stride;
  float* k_cache;  // [n_slots, n_head_kv * head_dim_qk]
  float* v_cache;  // [n_slots, n_head_kv * head_dim_v]
  const int64_t* slot_mapping;  // [n_tokens]; -1 = padding token, not written
  int64_t n_tokens;
  int64_t k_row_elements;  // n_head_kv * head_dim_qk
  int64_t v_row_elements;  // n_head_kv * head_dim_v
};

void write_kv(const WriteKvParams& p);

}  // namespace latentserve::cpu
