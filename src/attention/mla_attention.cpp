#include "attention/mla_attention.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <numeric>

#include "backend/cpu/linear.h"
#include "attention/paged_attention_call.h"
#include "core/convert.h"
#include "core/error.h"

namespace latentserve {

MlaAttention::MlaAttention(const MlaShape& shape, const TensorView& kv_b_proj, float softmax_scale)
    : shape_(shape), kv_b_proj_(kv_b_proj), softmax_scale_(softmax_scale) {
  const int64_t nh = shape.n_head, r = shape.kv_lora_rank, dn = shape.qk_nope_head_dim, dv = shape.v_head_dim;
  if (kv_b_proj.rank != 2 || kv_b_proj.dim(0) != nh * (dn + dv) || kv_b_proj.dim(1) != r)
    fail("kv_b_proj: expected shape [{}, {}], found {}", nh * (dn + dv), r, kv_b_proj.shape_string());
  // W_UK[h]ᵀ: rows h*(dn+dv) .. +dn of kv_b_proj, transposed to [r, dn].
  w_uk_t_.resize(size_t(nh * r * dn));
  std::vector<float> row(static_cast<size_t>(r));
  const size_t row_bytes = size_t(r) * dtype_size_bytes(kv_b_proj.dtype);
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t d = 0; d < dn; ++d) {
      convert_to_f32(static_cast<const char*>(kv_b_proj.data) + size_t(h * (dn + dv) + d) * row_bytes,
                     kv_b_proj.dtype, row.data(), r);
      for (int64_t c = 0; c < r; ++c) w_uk_t_[size_t((h * r + c) * dn + d)] = row[size_t(c)];
    }
}

MlaPath choose_mla_path(MlaPath requested, const AttentionMetadata& meta) {
  if (requested != MlaPath::Auto) return requested;
  for (int64_t s = 0; s < meta.n_seqs(); ++s) {
    const int64_t n_new = meta.query_start_loc[size_t(s) + 1] - meta.query_start_loc[size_t(s)];
    if (n_new <= 1 || meta.seq_lens[size_t(s)] > kMlaNaiveMaxContext) return MlaPath::Absorbed;
  }
  return MlaPath::Naive;
}

void MlaAttention::forward(MlaPath path, const float* q, const AttentionMetadata& meta, const float* latent, float* out,
                           ThreadPool& pool) {
  forward(path, q, meta, cpu::KvRows::f32(latent, shape_.latent_row(), meta.block_size_tokens), out, pool);
}

void MlaAttention::forward(MlaPath path, const float* q, const AttentionMetadata& meta, const cpu::KvRows& latent,
                           float* out, ThreadPool& pool) {
  if (meta.n_tokens() == 0) return;
  if (latent.row_elements != shape_.latent_row())
    fail("MLA latent cache rows hold {} elements, expected kv_lora_rank + qk_rope_head_dim = {}", latent.row_elements,
         shape_.latent_row());
  if (choose_mla_path(path, meta) == MlaPath::Absorbed)
    forward_absorbed(q, meta, latent, out, pool);
  else
    forward_naive(q, meta, latent, out, pool);
}

void MlaAttention::forward_absorbed(const float* q, const AttentionMetadata& meta, const cpu::KvRows& latent,
                                    float* out, ThreadPool& pool) {
  const int64_t T = meta.n_tokens(), nh = shape_.n_head, r = shape_.kv_lora_rank, dn = shape_.qk_nope_head_dim,
                dr = shape_.qk_rope_head_dim, dv = shape_.v_head_dim, dq = shape_.qk_head_dim(), row = shape_.latent_row();
  q_abs_.resize(size_t(T * nh * row));
  // The absorbed q and out projections are 2 x nh tiny linears (one head's W_UK / W_UV each):
  // the heads run in one parallel_for, each linear inline on its chunk's thread, so a layer
  // makes two fork-joins instead of 2 x nh. Each chunk takes its own scratch slot (a chunk
  // ordinal; at most pool.n_threads() chunks) so threads never share head_in / head_out.
  const int64_t in_width = std::max(dn, r), out_width = std::max(r, dv);
  const int64_t slot_floats = T * (in_width + out_width);
  head_scratch_.resize(size_t(pool.n_threads() * slot_floats));
  const auto for_each_head = [&](const auto& per_head) {
    std::atomic<int64_t> next_slot{0};
    pool.parallel_for(0, nh, [&](int64_t h0, int64_t h1) {
      const int64_t slot = next_slot.fetch_add(1, std::memory_order_relaxed);
      assert(slot < pool.n_threads());
      float* head_in = &head_scratch_[size_t(slot * slot_floats)];  // [T, in_width]
      float* head_out = head_in + T * in_width;                     // [T, out_width]
      for (int64_t h = h0; h < h1; ++h) per_head(h, head_in, head_out);
    });
  };
  // q_abs[T, nh, r + dr] = [q_nope W_UK | q_pe]
  for_each_head([&](int64_t h, float* head_in, float* head_out) {
    for (int64_t t = 0; t < T; ++t) std::memcpy(&head_in[size_t(t * dn)], q + (t * nh + h) * dq, size_t(dn) * 4);
    TensorView w_uk_t = TensorView::contiguous(&w_uk_t_[size_t(h * r * dn)], DType::F32, {r, dn});
    cpu::linear(head_in, T, w_uk_t, nullptr, head_out, pool);  // [T, r]
    for (int64_t t = 0; t < T; ++t) {
      float* dst = &q_abs_[size_t((t * nh + h) * row)];
      std::memcpy(dst, &head_out[size_t(t * r)], size_t(r) * 4);
      std::memcpy(dst + r, q + (t * nh + h) * dq + dn, size_t(dr) * 4);
    }
  });
  // MQA over the latent rows: key = row (r + dr), value = row[:r]. o_lat: [T, nh, r]
  o_lat_.resize(size_t(T * nh * r));
  cpu::PagedAttentionParams p = paged_attention_params(meta);
  p.q = q_abs_.data();
  p.q_token_stride = nh * row;
  p.k_cache = latent;
  p.v_cache = latent;  // the value is the first kv_lora_rank elements of the same row
  p.out = o_lat_.data();
  p.n_head = nh;
  p.n_head_kv = 1;
  p.head_dim_qk = row;
  p.head_dim_v = r;
  p.softmax_scale = softmax_scale_;
  cpu::paged_attention(p, pool);
  // out[:, h, :] = o_lat[:, h, :] W_UV[h]ᵀ, W_UV[h] = kv_b_proj rows h*(dn+dv)+dn .. +dv
  for_each_head([&](int64_t h, float* head_in, float* head_out) {
    for (int64_t t = 0; t < T; ++t) std::memcpy(&head_in[size_t(t * r)], &o_lat_[size_t((t * nh + h) * r)], size_t(r) * 4);
    const TensorView w_uv = kv_b_proj_.slice(0, h * (dn + dv) + dn, (h + 1) * (dn + dv));  // [dv, r]
    cpu::linear(head_in, T, w_uv, nullptr, head_out, pool);                                  // [T, dv]
    for (int64_t t = 0; t < T; ++t) std::memcpy(out + (t * nh + h) * dv, &head_out[size_t(t * dv)], size_t(dv) * 4);
  });
}

void MlaAttention::forward_naive(const float* q, const AttentionMetadata& meta, const cpu::KvRows& latent, float* out,
                                 ThreadPool& pool) {
  const int64_t nh = shape_.n_head, r = shape_.kv_lora_rank, dn = shape_.qk_nope_head_dim,
                dr = shape_.qk_rope_head_dim, dv = shape_.v_head_dim, dq = shape_.qk_head_dim();
  const int64_t bs = meta.block_size_tokens;
  for (int64_t s = 0; s < meta.n_seqs(); ++s) {
    const int64_t L = meta.seq_lens[size_t(s)];
    const int64_t q_begin = meta.query_start_loc[size_t(s)], n_new = meta.query_start_loc[size_t(s) + 1] - q_begin;
    const int32_t* table = &meta.block_tables[size_t(s * meta.max_blocks_per_seq)];
    // c[L, r], k_pe[L, dr] <- the sequence's cached latents in position order, dequantised
    c_tmp_.resize(size_t(L * r));
    pe_tmp_.resize(size_t(L * dr));
    for (int64_t pos = 0; pos < L; ++pos) {
      const int64_t slot = int64_t(table[pos / bs]) * bs + pos % bs;
      cpu::dequantize_row(latent, slot, 0, r, &c_tmp_[size_t(pos * r)]);
      cpu::dequantize_row(latent, slot, r, dr, &pe_tmp_[size_t(pos * dr)]);
    }
    // kv[L, nh * (dn + dv)] = c · kv_b_projᵀ
    kv_tmp_.resize(size_t(L * nh * (dn + dv)));
    cpu::linear(c_tmp_.data(), L, kv_b_proj_, nullptr, kv_tmp_.data(), pool);
    // K[L, nh, dn + dr] = [k_nope | k_pe], V[L, nh, dv], laid out as a dense cache of L slots
    const int64_t n_blocks = (L + bs - 1) / bs;
    k_tmp_.assign(size_t(n_blocks * bs * nh * dq), 0.0f);
    v_tmp_.assign(size_t(n_blocks * bs * nh * dv), 0.0f);
    for (int64_t pos = 0; pos < L; ++pos) {
      const float* k_pe = &pe_tmp_[size_t(pos * dr)];
      for (int64_t h = 0; h < nh; ++h) {
        const float* kv = &kv_tmp_[size_t((pos * nh + h) * (dn + dv))];
        float* k = &k_tmp_[size_t((pos * nh + h) * dq)];
        std::memcpy(k, kv, size_t(dn) * 4);
        std::memcpy(k + dn, k_pe, size_t(dr) * 4);
        std::memcpy(&v_tmp_[size_t((pos * nh + h) * dv)], kv + dn, size_t(dv) * 4);
      }
    }
    std::vector<int32_t> identity(static_cast<size_t>(n_blocks));
    std::iota(identity.begin(), identity.end(), 0);
    const int32_t query_start[2] = {0, int32_t(n_new)};
    const int32_t seq_len = int32_t(L);
    cpu::PagedAttentionParams p{};
    p.q = q + q_begin * nh * dq;
    p.q_token_stride = nh * dq;
    p.k_cache = cpu::KvRows::f32(k_tmp_.data(), nh * dq, bs);
    p.v_cache = cpu::KvRows::f32(v_tmp_.data(), nh * dv, bs);
    p.out = out + q_begin * nh * dv;
    p.query_start_loc = query_start;
    p.seq_lens = &seq_len;
    p.block_tables = identity.data();
    p.n_seqs = 1;
    p.max_blocks_per_seq = n_blocks;
    p.block_size = bs;
    p.n_head = nh;
    p.n_head_kv = nh;
    p.head_dim_qk = dq;
    p.head_dim_v = dv;
    p.softmax_scale = softmax_scale_;
    cpu::paged_attention(p, pool);
  }
}

}  // namespace latentserve
