#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace latentserve::cpu {

namespace {

// Eight independent partial sums so the compiler can keep them in one vector register.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int l = 0; l < 8; ++l) s += acc[l];
  return s;
}

inline void scale_add(float* y, const float* x, float alpha, int64_t n) {  // y += alpha * x
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// One query token, one KV head: the `group` query heads sharing that KV head.
struct GroupState {
  std::vector<float> scores;   // [group, block_size]
  std::vector<float> max;      // [group]
  std::vector<float> sum;      // [group]
  std::vector<float> acc;      // [group, head_dim_v]
  std::vector<float> k_tile;   // [block_size, head_dim_qk] dequantised K rows of one head (BF16 / FP8 caches)
  std::vector<float> v_tile;   // [block_size, head_dim_v]
};

// Rows [slot0, slot0 + n) of `rows`, elements [begin, begin + width): f32 rows are read in
// place; BF16 / FP8 rows are dequantised into `tile`. Returns the first row; *stride is the
// distance between rows in floats.
inline const float* load_rows(const KvRows& rows, int64_t slot0, int64_t n, int64_t begin, int64_t width,
                              std::vector<float>& tile, int64_t* stride) {
  if (rows.dtype == DType::F32) {
    *stride = rows.row_elements;
    return static_cast<const float*>(rows.data) + slot0 * rows.row_elements + begin;
  }
  dequantize_rows(rows, slot0, n, begin, width, tile.data());
  *stride = width;
  return tile.data();
}

// v_shares_k: the V rows are the first head_dim_v elements of the K rows (MLA absorbed): the
// dequantised K tile serves as the V tile.
void attend_one_group(const PagedAttentionParams& p, bool v_shares_k, int64_t token, int64_t seq, int64_t query_pos,
                      int64_t kv_head, GroupState& st) {
  const int64_t group = p.n_head / p.n_head_kv;
  const int64_t dk = p.head_dim_qk, dv = p.head_dim_v, bs = p.block_size;
  const int32_t* table = p.block_tables + seq * p.max_blocks_per_seq;
  const int64_t ctx_end = query_pos + 1;  // causal: keys 0..query_pos
  const int64_t ctx_begin = p.sliding_window > 0 ? std::max<int64_t>(0, query_pos - p.sliding_window + 1) : 0;
  const float* q0 = p.q + token * p.q_token_stride + kv_head * group * dk;  // [group, dk]

  st.scores.resize(size_t(group * bs));
  st.max.assign(size_t(group), -std::numeric_limits<float>::infinity());
  st.sum.assign(size_t(group), 0.0f);
  st.acc.assign(size_t(group * dv), 0.0f);
  if (p.k_cache.dtype != DType::F32) st.k_tile.resize(size_t(bs * dk));
  if (p.v_cache.dtype != DType::F32 && !v_shares_k) st.v_tile.resize(size_t(bs * dv));

  for (int64_t tile_begin = ctx_begin - ctx_begin % bs; tile_begin < ctx_end; tile_begin += bs) {
    const int64_t block = table[tile_begin / bs];
    assert(block >= 0);
    const int64_t first = std::max(tile_begin, ctx_begin), last = std::min(tile_begin + bs, ctx_end);
    const int64_t n = last - first;
    const int64_t slot0 = block * bs + (first - tile_begin);
    int64_t k_stride = 0, v_stride = 0;
    const float* k_rows = load_rows(p.k_cache, slot0, n, kv_head * dk, dk, st.k_tile, &k_stride);  // [n, dk]
    // scores[g, j] = scale * q_g · k_j over this tile
    for (int64_t j = 0; j < n; ++j) {
      const float* k = k_rows + j * k_stride;
      for (int64_t g = 0; g < group; ++g) st.scores[size_t(g * bs + j)] = p.softmax_scale * dot(q0 + g * dk, k, dk);
    }
    for (int64_t g = 0; g < group; ++g) {
      float* s = &st.scores[size_t(g * bs)];
      float tile_max = *std::max_element(s, s + n);
      float new_max = std::max(st.max[size_t(g)], tile_max);
      float correction = std::exp(st.max[size_t(g)] - new_max);  // exp(-inf) = 0 on the first tile
      float* acc = &st.acc[size_t(g * dv)];
      for (int64_t d = 0; d < dv; ++d) acc[d] *= correction;
      float tile_sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - new_max);
        tile_sum += s[j];
      }
      st.sum[size_t(g)] = st.sum[size_t(g)] * correction + tile_sum;
      st.max[size_t(g)] = new_max;
    }
    // acc[g] += Σ_j s[g, j] * v_j
    const float* v_rows = k_rows;  // [n, dv]
    v_stride = k_stride;
    if (!v_shares_k) v_rows = load_rows(p.v_cache, slot0, n, kv_head * dv, dv, st.v_tile, &v_stride);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_rows + j * v_stride;
      for (int64_t g = 0; g < group; ++g) scale_add(&st.acc[size_t(g * dv)], v, st.scores[size_t(g * bs + j)], dv);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* out = p.out + (token * p.n_head + kv_head * group + g) * dv;
    const float inv = 1.0f / st.sum[size_t(g)];
    for (int64_t d = 0; d < dv; ++d) out[d] = st.acc[size_t(g * dv + d)] * inv;
  }
}

}  // namespace

void paged_attention(const PagedAttentionParams& p, ThreadPool& pool) {
  assert(p.n_head % p.n_head_kv == 0);
  assert(p.k_cache.dtype == DType::F32 || p.k_cache.block_size_tokens == p.block_size);
  assert(p.v_cache.dtype == DType::F32 || p.v_cache.block_size_tokens == p.block_size);
  const bool v_shares_k = p.v_cache.data == p.k_cache.data && p.v_cache.row_bytes == p.k_cache.row_bytes &&
                          p.n_head_kv == 1 && p.head_dim_v <= p.head_dim_qk;
  const int64_t n_tokens = p.query_start_loc[p.n_seqs];
  // token -> (sequence, position in the sequence)
  std::vector<int64_t> token_seq(static_cast<size_t>(n_tokens)), token_pos(static_cast<size_t>(n_tokens));
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t begin = p.query_start_loc[s], end = p.query_start_loc[s + 1];
    const int64_t first_pos = p.seq_lens[s] - (end - begin);  // earlier tokens are cached context
    assert(first_pos >= 0);
    for (int64_t t = begin; t < end; ++t) {
      token_seq[size_t(t)] = s;
      token_pos[size_t(t)] = first_pos + (t - begin);
    }
  }
  pool.parallel_for(0, n_tokens * p.n_head_kv, [&](int64_t begin, int64_t end) {
    GroupState state;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t token = item / p.n_head_kv, kv_head = item % p.n_head_kv;
      attend_one_group(p, v_shares_k, token, token_seq[size_t(token)], token_pos[size_t(token)], kv_head, state);
    }
  });
}

void write_kv(const WriteKvParams& p) {
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(p.k_cache + slot * p.k_row_elements, p.k + t * p.k_token_stride, size_t(p.k_row_elements) * 4);
    std::memcpy(p.v_cache + slot * p.v_row_elements, p.v + t * p.v_token_stride, size_t(p.v_row_elements) * 4);
  }
}

}  // namespace latentserve::cpu
