// Paged decode attention, stream-K: the step's K/V tiles, in (sequence, KV head, tile) order, are
// cut into one contiguous range per CTA (equal counts), so every CTA reads the same bytes and the
// cp.async pipeline runs without a break from the first tile of a CTA to its last, across
// (sequence, KV head) boundaries. Why and what it measured: docs/cuda-decode-attention.md
// ("Stream-K").
//
// One CTA, 4 warps (the split kernel's warp roles at group <= 16: one m-tile, four 16-key slices
// of each 64-key tile). Per tile: the producer issues the copies of the tile kStages - 1 ahead
// (its block ids were fetched one tile earlier into registers), then the warps run attend_tile.
// Where a (sequence, KV head) pair ends, or the CTA's range does, each warp writes its own
// partial (max, sum, acc) to slot (pair + cta) of the workspace (unique: pairs and CTA ranges
// are both in stream order), and the CTA counts itself on the pair's counter; the CTA that
// completes the count merges the pair's 4 x (CTAs that touched it) partials from L2 and writes
// bf16, then resets the counter (so a captured graph replays). q's A fragments come straight
// from global memory into registers, for the next pair while the current pair's last tile runs.
#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/paged_decode_common.cuh"

namespace latentserve::cuda::paged_decode {
namespace {

template <int HD, bool FP8>
struct StreamKConfig {
  using C = Config<HD, FP8, 1, 1, kStreamKWarps, kStagesBase>;  // tile geometry and fragment counts
  static constexpr int kTableBytes = (2 * kStreamKMaxSeqs + 1) * 4;  // tile prefix + lengths per sequence
  // the most stages (<= 6) that keep two CTAs per SM (64 bytes for the kernel's static shared memory)
  static constexpr int kBudget = kSmemPerSm / 2 - kSmemReservedPerCta - 128;
  static constexpr int fit_stages() {
    int s = 2;
    while (s < 6 && (s + 1) * C::kStageBytes + kTableBytes <= kBudget) ++s;
    return s;
  }
  static constexpr int kStages = fit_stages();
  static constexpr int kPipeBytes = kStages * C::kStageBytes;
  static constexpr int kSmemBytes = kPipeBytes + kTableBytes;
  static_assert(kSmemBytes <= kBudget, "two CTAs per SM");
};

// Where the stream is: pair (s, kvh), tile j of its n tiles, keys [lo, hi).
struct Cursor {
  int s, kvh, j, n, lo, hi;
};

template <int HD, bool FP8>
__global__ void __launch_bounds__(kStreamKWarps * 32, 2) paged_decode_streamk_kernel(const KernelArgs a) {
  using SK = StreamKConfig<HD, FP8>;
  using C = typename SK::C;
  constexpr int kStages = SK::kStages;
  constexpr int kTile = C::kTileKeys;  // 64
  constexpr int kThreadsC = C::kThreads;
  extern __shared__ __align__(128) unsigned char smem[];
  int* prefix_s = reinterpret_cast<int*>(smem + SK::kPipeBytes);  // [kStreamKMaxSeqs + 1] tiles before sequence s (per KV head)
  int* len_s = prefix_s + kStreamKMaxSeqs + 1;                     // [kStreamKMaxSeqs] seq_len, -1 = invalid
  __shared__ int warp_total_s[kStreamKWarps];
  __shared__ int is_last_s;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c4 = lane & 3;
  const int cta = blockIdx.x, n_ctas = gridDim.x;
  const int n_seqs = a.n_seqs, nkv = a.n_head_kv, group = a.group;

  griddep_launch_dependents();
  griddep_wait();

  // ---- tiles per sequence (a KV head's share) and their exclusive prefix; every CTA the same ----
  constexpr int kPer = kStreamKMaxSeqs / kThreadsC;
  int counts[kPer], local = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int s = tid * kPer + i;
    const int len = s < n_seqs ? a.seq_lens[s] : 0;
    const bool bad = len < 0 || len > a.max_valid_len;
    int tiles = 0;
    if (!bad && len > 0) tiles = (len - (a.sliding_window > 0 ? max(0, len - a.sliding_window) : 0) + kTile - 1) / kTile;
    if (s < n_seqs) len_s[s] = bad ? -1 : len;
    counts[i] = tiles;
    local += tiles;
  }
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_total_s[warp] = incl;
  __syncthreads();
  int run = incl - local;
  for (int w = 0; w < warp; ++w) run += warp_total_s[w];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    prefix_s[tid * kPer + i] = run;
    run += counts[i];
  }
  if (tid == kThreadsC - 1) prefix_s[kStreamKMaxSeqs] = run;
  __syncthreads();

  // ---- rows no tile covers: zeros for a padded row (seq_len 0), NaN for an invalid length ----
  for (int p = cta; p < n_seqs * nkv; p += n_ctas) {
    const int s = p / nkv;
    if (prefix_s[s + 1] != prefix_s[s]) continue;
    const uint32_t fill = len_s[s] < 0 ? 0x7fc07fc0u : 0u;
    uint16_t* out = a.out + (int64_t(s) * a.n_head + int64_t(p % nkv) * group) * HD;
    for (int i = tid; i < group * (HD / 8); i += kThreadsC)
      reinterpret_cast<uint4*>(out)[i] = make_uint4(fill, fill, fill, fill);
  }

  // ---- this CTA's range [g0, g1) of the step's tiles ----
  const int total = nkv * prefix_s[n_seqs];
  const int per_cta = (total + n_ctas - 1) / n_ctas;
  const int g0 = cta * per_cta, g1 = min(total, g0 + per_cta);
  if (g0 >= g1) return;

  auto set_seq = [&](Cursor& c, int s) {
    c.s = s;
    c.n = prefix_s[s + 1] - prefix_s[s];
    c.hi = len_s[s];
    c.lo = a.sliding_window > 0 ? max(0, c.hi - a.sliding_window) : 0;
  };
  auto advance = [&](Cursor& c) {
    if (++c.j < c.n) return;
    c.j = 0;
    if (++c.kvh < nkv) return;
    c.kvh = 0;
    int s = c.s + 1;
    while (s < n_seqs && prefix_s[s + 1] == prefix_s[s]) ++s;  // sequences without tiles
    if (s < n_seqs) set_seq(c, s);
    else c.s = n_seqs;  // past the end (never used)
  };
  Cursor cc;  // the consumer: the tile the warps compute next
  {
    // the last sequence whose first tile is at or before g0 (it has tiles: g0 < total)
    int lo = 0, hi = n_seqs;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (nkv * prefix_s[mid] <= g0) lo = mid;
      else hi = mid;
    }
    set_seq(cc, lo);
    const int off = g0 - nkv * prefix_s[lo];
    cc.kvh = off / cc.n;
    cc.j = off % cc.n;
  }

  // ---- producer: copies of tile (cursor) into a stage; block ids one tile ahead in registers ----
  Cursor pc = cc;
  int gp = g0;  // the producer's next tile
  const int block_size = 1 << a.log2_block_size;
  const int copy_chunk = tid % C::kChunksPerRow, copy_row0 = tid / C::kChunksPerRow;
  const uint32_t pipe_addr = smem_addr(smem);
  int ids[C::kRowsPerThread];
  auto fetch_ids = [&](const Cursor& c) {
    const int base = c.lo + c.j * kTile;
    const int32_t* table = a.block_tables + int64_t(c.s) * a.max_blocks_per_seq;
#pragma unroll
    for (int i = 0; i < C::kRowsPerThread; ++i) {
      const int pos = base + copy_row0 + i * C::kRowsPerPass;
      ids[i] = pos < c.hi ? table[pos >> a.log2_block_size] : 0;
    }
  };
  auto issue = [&](const Cursor& c, int stage) {
    const int base = c.lo + c.j * kTile;
    const uint32_t dst0 = pipe_addr + stage * C::kStageBytes + copy_chunk * 16;
#pragma unroll
    for (int i = 0; i < C::kRowsPerThread; ++i) {
      const int r = copy_row0 + i * C::kRowsPerPass;
      const int pos = base + r;
      const bool ok = pos < c.hi;
      const int64_t off =
          ok ? kv_row_index(a.layout, ids[i], pos & (block_size - 1), c.kvh, nkv, block_size) * C::kRowBytes + copy_chunk * 16
             : 0;
      const uint32_t dst = dst0 + r * C::kRowStride;
      cp_async_16(dst, a.k + off, ok ? 16 : 0);
      cp_async_16(dst + C::kTileBytes, a.v + off, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (gp < g1) {
      fetch_ids(pc);
      issue(pc, st);
      advance(pc);
      ++gp;
    }
    cp_async_commit();
  }
  if (gp < g1) fetch_ids(pc);

  // ---- q of a pair: A fragments from global memory (rows >= group zero) ----
  // FP8: f16, pre-multiplied by softmax_scale, at the k positions the FP8 K fragments expect.
  auto load_q = [&](uint32_t (&qf)[C::kQK][4], const Cursor& c) {
    const uint16_t* qg = a.q + int64_t(c.s) * a.q_seq_stride + int64_t(c.kvh) * group * HD;
#pragma unroll
    for (int kk = 0; kk < C::kQK; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = g + (r & 1) * 8, k0 = kk * 16 + (r >> 1) * 8 + 2 * c4;
        uint32_t v = 0;
        if (row < group) {
          const uint16_t* q_row = qg + int64_t(row) * HD;
          if constexpr (!FP8) {
            v = *reinterpret_cast<const uint32_t*>(q_row + k0);
          } else {
            const float x0 = __uint_as_float(uint32_t(q_row[fp8_k_source(k0)]) << 16) * a.softmax_scale;
            const float x1 = __uint_as_float(uint32_t(q_row[fp8_k_source(k0 + 1)]) << 16) * a.softmax_scale;
            v = pack2<true>(x0, x1);
          }
        }
        qf[kk][r] = v;
      }
  };
  const float kLog2e = 1.4426950408889634f;
  auto score_scale_of = [&](int kvh) {
    return FP8 ? kLog2e * a.k_scale[kvh * a.scale_head_stride] : kLog2e * a.softmax_scale;
  };

  uint32_t q_reg[C::kQK][4], q_next[C::kQK][4];
  load_q(q_reg, cc);
  float score_scale = score_scale_of(cc.kvh);
  auto q_frag = [&](uint32_t (&qa)[4], int, int kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) qa[i] = q_reg[kk][i];
  };
  float acc[1][C::kDN][4], m_run[1][2], l_run[1][2];
  auto reset = [&] {
#pragma unroll
    for (int n = 0; n < C::kDN; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][n][i] = 0.f;
    m_run[0][0] = m_run[0][1] = -INFINITY;
    l_run[0][0] = l_run[0][1] = 0.f;
  };
  reset();
  const int key_off = warp * C::kKeysPerWarp;

  const int n_mine = g1 - g0;
  for (int t = 0; t < n_mine; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t visible to all warps; every warp is done with tile t-1's stage
    if (gp < g1) {
      issue(pc, (t + kStages - 1) % kStages);
      advance(pc);
      if (++gp < g1) fetch_ids(pc);
    }
    cp_async_commit();

    const bool cta_end = t == n_mine - 1;
    const bool seg_end = cta_end || cc.j == cc.n - 1;
    Cursor next = cc;
    if (seg_end && !cta_end) {  // the next pair's q, in flight under this tile
      advance(next);
      load_q(q_next, next);
    }
    const uint32_t k_st = pipe_addr + (t % kStages) * C::kStageBytes;
    attend_tile<C, FP8, 1, false, false, false>(k_st, k_st + C::kTileBytes, key_off, cc.lo + cc.j * kTile, cc.hi,
                                         score_scale, q_frag, acc, m_run, l_run);
    if (!seg_end) {
      ++cc.j;
      continue;
    }

    // ---- end of this CTA's segment of pair (s, kvh): the warp's partial -> slot (pair + cta) ----
    const int pair = cc.s * nkv + cc.kvh;
    const int start = nkv * prefix_s[cc.s] + cc.kvh * cc.n;  // the pair's first tile in the stream
    const int c_first = start / per_cta, c_last = (start + cc.n - 1) / per_cta;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[0][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = g + 8 * r;
      if (row >= group) continue;
      const int64_t w = (int64_t(pair + cta) * kStreamKWarps + warp) * group + row;
      float* dst = a.ws_acc + w * HD;
#pragma unroll
      for (int n = 0; n < C::kDN; ++n) {
        if constexpr (!FP8) {
          *reinterpret_cast<float2*>(dst + n * 8 + 2 * c4) = make_float2(acc[0][n][2 * r], acc[0][n][2 * r + 1]);
        } else {
          dst[acc_dim<true>(n, 2 * c4)] = acc[0][n][2 * r];
          dst[acc_dim<true>(n, 2 * c4 + 1)] = acc[0][n][2 * r + 1];
        }
      }
      if (c4 == 0) *reinterpret_cast<float2*>(a.ws_ml + w * 2) = make_float2(m_run[0][r], l);
    }
    reset();
    // threadfence-reduction: partials written -> fence -> count; the CTA completing the count merges
    unsigned* counter = a.counters_end - pair;
    __threadfence();
    __syncthreads();
    if (tid == 0) is_last_s = atomicAdd(counter, 1u) + 1u == unsigned(c_last - c_first + 1);
    __syncthreads();
    if (is_last_s) {
      __threadfence();
      if (tid == 0) *counter = 0u;
      const float out_scale = FP8 ? a.v_scale[cc.kvh * a.scale_head_stride] : 1.f;
      const int64_t w_first = int64_t(pair + c_first) * kStreamKWarps * group;
      const int n_parts = (c_last - c_first + 1) * kStreamKWarps;
      for (int i = tid; i < group * (HD / 4); i += kThreadsC) {
        const int row = i / (HD / 4), d4 = i % (HD / 4);
        float m_max = -INFINITY;
        for (int k = 0; k < n_parts; ++k) m_max = fmaxf(m_max, __ldcg(a.ws_ml + (w_first + int64_t(k) * group + row) * 2));
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        float l_sum = 0.f;
        for (int k = 0; k < n_parts; ++k) {
          const int64_t w = w_first + int64_t(k) * group + row;
          const float2 m_l = __ldcg(reinterpret_cast<const float2*>(a.ws_ml + w * 2));
          if (m_l.x == -INFINITY) continue;  // a warp whose slices saw no key
          const float f = fast_exp2(m_l.x - m_max);
          const float4 v = __ldcg(reinterpret_cast<const float4*>(a.ws_acc + w * HD + d4 * 4));
          l_sum += f * m_l.y;
          sum.x += f * v.x;
          sum.y += f * v.y;
          sum.z += f * v.z;
          sum.w += f * v.w;
        }
        const float k = out_scale / l_sum;
        uint16_t* out = a.out + (int64_t(cc.s) * a.n_head + int64_t(cc.kvh) * group + row) * HD + d4 * 4;
        *reinterpret_cast<uint2*>(out) = make_uint2(pack2<false>(sum.x * k, sum.y * k), pack2<false>(sum.z * k, sum.w * k));
      }
    }
    if (cta_end) break;
    cc = next;
#pragma unroll
    for (int kk = 0; kk < C::kQK; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) q_reg[kk][i] = q_next[kk][i];
    score_scale = score_scale_of(cc.kvh);
  }
  cp_async_wait<0>();
}

template <int HD, bool FP8>
KernelShape streamk_for(const KernelArgs* args, int n_ctas, cudaStream_t stream) {
  using SK = StreamKConfig<HD, FP8>;
  if (args != nullptr) {
    static bool configured = false;
    auto kernel = paged_decode_streamk_kernel<HD, FP8>;
    set_smem_once(kernel, SK::kSmemBytes, configured);
    launch_pdl(kernel, dim3(n_ctas), SK::C::kThreads, SK::kSmemBytes, stream, *args, "paged_decode_streamk_kernel");
  }
  return KernelShape{SK::C::kThreads, SK::C::kTileKeys, SK::kStages, SK::kSmemBytes};
}

}  // namespace

KernelShape streamk_kernel(int head_dim, bool fp8, const KernelArgs* args, int n_ctas, cudaStream_t stream) {
  if (head_dim == 128) return fp8 ? streamk_for<128, true>(args, n_ctas, stream) : streamk_for<128, false>(args, n_ctas, stream);
  return fp8 ? streamk_for<64, true>(args, n_ctas, stream) : streamk_for<64, false>(args, n_ctas, stream);
}

}  // namespace latentserve::cuda::paged_decode
