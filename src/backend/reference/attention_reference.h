#pragma once
// Scalar f64 reference for causal attention over one sequence's contiguous K/V
// (no paging): the ground truth the paged kernel is tested against.
#include <cstdint>

namespace latentserve::reference {

// q:   [n_new, n_head, head_dim_qk]     the last n_new tokens of the sequence
// k:   [seq_len, n_head_kv, head_dim_qk]
// v:   [seq_len, n_head_kv, head_dim_v]
// out: [n_new, n_head, head_dim_v]
void causal_attention(const float* q, const float* k, const float* v, float* out, int64_t n_new, int64_t seq_len,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim_qk, int64_t head_dim_v, double scale,
                      int64_t sliding_window = 0);

}  // namespace latentserve::reference
