#include "backend/cuda/paged_attention_generic.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"

namespace latentserve::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // head_dim <= 32 * 8

__device__ __forceinline__ float load_kv(const DeviceKvLayer& kv, const void* base, int64_t index, float scale) {
  if (kv.dtype == KvDtype::Bf16) return bf16_to_f32(static_cast<const __nv_bfloat16*>(base)[index]);
  return fp8_e4m3_to_f32(static_cast<const unsigned char*>(base)[index]) * scale;
}

// grid: (ceil(n_tokens * n_head / 4)), block: 4 warps; warp w handles (token, head) = divmod(id, n_head).
__global__ void generic_attention_kernel(PagedPrefillParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t id = int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5);
  const int n_real = p.query_start_loc[p.n_seqs];
  if (id >= int64_t(n_real) * p.n_head) return;
  const int t = int(id / p.n_head), qh = int(id % p.n_head);
  int lo_s = 0, hi_s = p.n_seqs - 1;  // the sequence owning token t: qsl[s] <= t < qsl[s + 1]
  while (lo_s < hi_s) {
    const int mid = (lo_s + hi_s + 1) / 2;
    if (p.query_start_loc[mid] <= t) lo_s = mid; else hi_s = mid - 1;
  }
  const int s = lo_s;
  const int q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
  const int pos = p.seq_lens[s] - q_len + (t - p.query_start_loc[s]);
  const int first = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  const int h = qh / (p.n_head / p.n_head_kv);
  const float k_scale = p.kv.dtype == KvDtype::Bf16 ? 1.0f : p.kv.k_scale[h * p.kv.scale_head_stride];
  const float v_scale = p.kv.dtype == KvDtype::Bf16 ? 1.0f : p.kv.v_scale[h * p.kv.scale_head_stride];

  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q) + int64_t(t) * p.q_token_stride + int64_t(qh) * p.head_dim;
  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + 32 * j;
    qv[j] = d < p.head_dim ? bf16_to_f32(q[d]) * p.softmax_scale : 0.0f;
    acc[j] = 0.0f;
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int key = first; key <= pos; ++key) {
    const int block = p.block_tables[int64_t(s) * p.max_blocks_per_seq + key / p.block_size];
    const int64_t row = kv_row_index(p.kv.layout, block, key % p.block_size, h, p.n_head_kv, p.block_size);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < p.head_dim) dot += qv[j] * load_kv(p.kv, p.kv.k, row * p.head_dim + d, k_scale);
    }
    dot = warp_sum(dot);
    const float new_max = fmaxf(running_max, dot);
    const float correction = expf(running_max - new_max), weight = expf(dot - new_max);
    running_sum = running_sum * correction + weight;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < p.head_dim) acc[j] = acc[j] * correction + weight * load_kv(p.kv, p.kv.v, row * p.head_dim + d, v_scale);
    }
    running_max = new_max;
  }
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + (int64_t(t) * p.n_head + qh) * p.head_dim;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < p.head_dim) out[d] = __float2bfloat16(running_sum > 0 ? acc[j] / running_sum : 0.0f);
  }
}

}  // namespace

void paged_attention_generic(const PagedPrefillParams& p, cudaStream_t stream) {
  if (!p.q || !p.out || !p.kv.k || !p.kv.v || !p.query_start_loc || !p.seq_lens || !p.block_tables)
    kernel_fail("paged_attention_generic: q, out, kv.k, kv.v, query_start_loc, seq_lens and block_tables must be device pointers, one is null");
  if (p.head_dim <= 0 || p.head_dim > 32 * kMaxPerLane)
    kernel_fail("paged_attention_generic: head_dim must be in [1, ", 32 * kMaxPerLane, "], found ", p.head_dim);
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0)
    kernel_fail("paged_attention_generic: n_head (", p.n_head, ") must be a positive multiple of n_head_kv (", p.n_head_kv, ")");
  if (p.n_seqs <= 0 || p.n_tokens < 0 || p.block_size <= 0 || p.max_blocks_per_seq <= 0)
    kernel_fail("paged_attention_generic: n_seqs, block_size and max_blocks_per_seq must be positive, found ", p.n_seqs,
                ", ", p.block_size, ", ", p.max_blocks_per_seq);
  check_kv_block_size("paged_attention_generic: ", p.kv, p.block_size);
  if (p.q_token_stride < int64_t(p.n_head) * p.head_dim)
    kernel_fail("paged_attention_generic: q_token_stride ", p.q_token_stride, " is less than n_head * head_dim = ",
                int64_t(p.n_head) * p.head_dim);
  if (p.kv.dtype == KvDtype::Fp8E4M3 && (!p.kv.k_scale || !p.kv.v_scale))
    kernel_fail("paged_attention_generic: an fp8 KV cache needs k_scale and v_scale");
  if (p.n_tokens == 0) return;
  const int64_t warps = int64_t(p.n_tokens) * p.n_head;  // rows past query_start_loc[n_seqs] exit at once
  generic_attention_kernel<<<unsigned((warps + 3) / 4), 128, 0, stream>>>(p);
  LS_CUDA_CHECK_LAUNCH("generic_attention_kernel");
}

}  // namespace latentserve::cuda
