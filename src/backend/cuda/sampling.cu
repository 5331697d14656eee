#include "backend/cuda/sampling.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"

namespace latentserve::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kArgmaxThreads = 1024;
constexpr int kThreads = 512, kWarps = kThreads / 32;  // sample_rows: f64 work, 128 registers per thread allowed
constexpr int kLoadsPerThread = 8;
constexpr int kChunk = kThreads * kLoadsPerThread;  // logits one CTA pass step covers
constexpr int kMaxCtasPerRow = 8;                   // the portable thread-block cluster size

// ---- keys: floats as unsigned integers in the same order (-0 and +0 one key; NaN never asked) ----
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v == 0.0f) v = 0.0f;  // -0 -> +0: equal logits are one key
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// ---- argmax: (key << 32 | ~index) packed, so one unsigned max picks the larger value and, on
// ties, the lower index; NaN packs to 0 and loses to everything (-inf included) ----
__device__ __forceinline__ unsigned long long pack(float v, int i) {
  return isnan(v) ? 0ull : (static_cast<unsigned long long>(order_key(v)) << 32) | (0xffffffffu - uint32_t(i));
}
__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long y = __shfl_xor_sync(kFull, x, o);
    x = y > x ? y : x;
  }
  return x;
}

// The row's argmax over blockDim.x threads (a multiple of 32, <= 1024); every thread gets it.
__device__ int row_argmax(const float* row, int vocab) {
  __shared__ unsigned long long partial[32];
  __shared__ int result;
  unsigned long long best = 0;
  const int tid = threadIdx.x, nt = blockDim.x;
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    const int n4 = vocab / 4;
    int q = tid;
    for (; q + 3 * nt < n4; q += 4 * nt) {  // four 16-byte loads in flight
      float4 a[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) a[j] = r4[q + j * nt];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * (q + j * nt);
        const unsigned long long c = max(max(pack(a[j].x, i), pack(a[j].y, i + 1)), max(pack(a[j].z, i + 2), pack(a[j].w, i + 3)));
        best = c > best ? c : best;
      }
    }
    for (; q < n4; q += nt) {
      const float4 a = r4[q];
      const int i = 4 * q;
      const unsigned long long c = max(max(pack(a.x, i), pack(a.y, i + 1)), max(pack(a.z, i + 2), pack(a.w, i + 3)));
      best = c > best ? c : best;
    }
    for (int i = 4 * n4 + tid; i < vocab; i += nt) best = max(best, pack(row[i], i));
  } else {
    for (int i = tid; i < vocab; i += nt) best = max(best, pack(row[i], i));
  }
  best = warp_max_u64(best);
  if ((tid & 31) == 0) partial[tid >> 5] = best;
  __syncthreads();
  if (tid < 32) {
    unsigned long long v = tid < nt / 32 ? partial[tid] : 0ull;
    v = warp_max_u64(v);
    if (tid == 0) result = v == 0ull ? 0 : int(0xffffffffu - uint32_t(v));  // only NaN: 0
  }
  __syncthreads();
  return result;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int vocab, int32_t* out) {
  wait_for_previous_kernel();  // launched under the LM head's tail
  const int best = row_argmax(logits + int64_t(blockIdx.x) * vocab, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}

// ---- sample_rows ----
// A row is split over the CTAs of one thread-block cluster (1 to kMaxCtasPerRow): CTA `rank`
// takes the row's chunks rank, rank + n, ... of kChunk logits. Every reduction combines the
// CTAs' values in rank order (through distributed shared memory), so every CTA of the row
// computes the same numbers and takes the same branches; rank 0 writes the token.
namespace cg = cooperative_groups;
__device__ __forceinline__ int row_rank() { return int(cg::this_cluster().block_rank()); }
__device__ __forceinline__ int row_ctas() { return int(cg::this_cluster().num_blocks()); }
__device__ __forceinline__ void row_sync() { cg::this_cluster().sync(); }  // all threads of the row's CTAs
template <class T>
__device__ __forceinline__ T* on_rank(T* local, int rank) {  // the same variable in CTA `rank`
  return cg::this_cluster().map_shared_rank(local, rank);
}

struct Shared {
  double dhist[256];  // this CTA's bins
  int chist[256];
  double row_dhist[256];  // the row's bins: every CTA's, summed in rank order
  int row_chist[256];
  double lane_mass[kThreads];  // add_to_bin's per-warp staging
  double wsum[kWarps];
  int wint[kWarps];
  double d0, d1;
  int i0, i1, i2;
  uint32_t u0;
  float f0;
  double set_mass;  // mass_search: the set's mass from its first pass
  int slot_i;
  float slot_f;
};

// What a row keeps after min_p and top_k: x = double(l) / T, finite, >= floor, key >= topk_key.
struct Row {
  const float* l;
  int vocab;
  double temperature, m, floor;
  uint32_t topk_key;
  // The integer tests first: the f64 division is most of a pass's cost (one CTA per row).
  __device__ __forceinline__ bool kept(float v, double& x) const {
    if (isnan(v) || v == -INFINITY || order_key(v) < topk_key) return false;
    x = double(v) / temperature;
    return x >= floor;
  }
  __device__ __forceinline__ double mass(double x) const { return exp(x - m); }
};

// The sum over every thread of the row's CTAs (every CTA gets it).
__device__ int row_sum_int(int v, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh.wint[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int w = 0; w < kWarps; ++w) s += sh.wint[w];
    sh.slot_i = s;
  }
  row_sync();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int r = 0; r < row_ctas(); ++r) s += *on_rank(&sh.slot_i, r);
    sh.i0 = s;
  }
  row_sync();
  return sh.i0;
}

// After a histogram pass: row_chist (and row_dhist) = every CTA's bins, summed in rank order.
__device__ void merge_bins(Shared& sh, bool with_mass) {
  row_sync();  // every CTA's pass is done
  const int n = row_ctas();
  for (int d = threadIdx.x; d < 256; d += kThreads) {
    int c = 0;
    double m = 0.0;
    for (int r = 0; r < n; ++r) {
      c += on_rank(sh.chist, r)[d];
      if (with_mass) m += on_rank(sh.dhist, r)[d];
    }
    sh.row_chist[d] = c;
    if (with_mass) sh.row_dhist[d] = m;
  }
  row_sync();  // every CTA has read the bins (the next pass clears them); row_* visible
}

// Adds (mass, 1) to bin d for every lane with `take`, with one shared atomic per distinct bin of
// the warp. Random logits share their top bits, so most of a row lands in a few bins: lane by lane
// the f64 shared atomics (CAS loops) serialised 128K adds on one address, 2.6 ms a row on the
// H200. Called by all 32 lanes of the warp together.
__device__ __forceinline__ void add_to_bin(Shared& sh, bool take, uint32_t d, double mass, bool with_mass) {
  const unsigned takers = __ballot_sync(kFull, take);
  if (takers == 0) return;
  const unsigned peers = __match_any_sync(kFull, take ? d : 256u) & takers;  // 256: in no bin
  if (with_mass) {
    sh.lane_mass[threadIdx.x] = mass;
    __syncwarp();
  }
  if (take && (threadIdx.x & 31) == unsigned(__ffs(peers) - 1)) {
    if (with_mass) {
      const int warp0 = threadIdx.x & ~31;
      double sum = 0.0;
      for (unsigned b = peers; b; b &= b - 1) sum += sh.lane_mass[warp0 + __ffs(b) - 1];
      atomicAdd(&sh.dhist[d], sum);
    }
    atomicAdd(&sh.chist[d], __popc(peers));
  }
  if (with_mass) __syncwarp();
}

// f(i, v) for i = threadIdx.x + j * kThreads (j < kLoadsPerThread) of each of this CTA's
// kChunk-logit chunks of the row, v = row[i], or NaN with i >= vocab past the end: each thread
// has kLoadsPerThread loads in flight before it works on them. The trip count is uniform over
// the CTA (f may use warp collectives).
template <class F>
__device__ __forceinline__ void for_each_logit(const float* row, int vocab, F f) {
  for (int base = row_rank() * kChunk; base < vocab; base += row_ctas() * kChunk) {
    float v[kLoadsPerThread];
#pragma unroll
    for (int j = 0; j < kLoadsPerThread; ++j) {
      const int i = base + j * kThreads + int(threadIdx.x);
      v[j] = i < vocab ? __ldg(row + i) : NAN;
    }
#pragma unroll
    for (int j = 0; j < kLoadsPerThread; ++j) f(base + j * kThreads + int(threadIdx.x), v[j]);
  }
}

// The k-th largest key (with multiplicity) among the non-NaN logits: radix select, 8 bits a pass.
__device__ uint32_t kth_largest_key(const Row& r, int k, Shared& sh) {
  uint32_t prefix = 0;
  int k_rem = k;
  for (int level = 0; level < 4; ++level) {
    const int shift = 24 - 8 * level;
    const uint32_t mask = level == 0 ? 0u : (0xffffffffu << (32 - 8 * level));
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.chist[i] = 0;
    __syncthreads();
    for_each_logit(r.l, r.vocab, [&](int, float v) {
      const uint32_t key = order_key(v);
      add_to_bin(sh, !isnan(v) && (key & mask) == prefix, (key >> shift) & 255u, 0.0, false);
    });
    merge_bins(sh, false);
    if (threadIdx.x == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + sh.row_chist[d] >= k_rem) break;
        above += sh.row_chist[d];
      }
      sh.u0 = prefix | (uint32_t(d) << shift);
      sh.i1 = k_rem - above;
    }
    __syncthreads();
    prefix = sh.u0;
    k_rem = sh.i1;
  }
  return prefix;
}

// The largest key K such that the mass of the set's elements with key >= K is > target (strict)
// or >= target: radix search, 8 bits a pass, f64 mass per bin. Out: K, the mass of the set
// above K, how many elements have key K. False when the whole set's mass does not reach target.
// With fraction > 0 the target is fraction * the set's mass, which the first pass's bins sum
// to (no pass of its own); *set_mass gets that mass.
template <class InSet>
__device__ bool mass_search(const Row& r, InSet in_set, double target, bool strict, Shared& sh, uint32_t& K,
                            double& above, int& count, double fraction = 0.0, double* set_mass = nullptr) {
  uint32_t prefix = 0;
  for (int level = 0; level < 4; ++level) {
    const int shift = 24 - 8 * level;
    const uint32_t mask = level == 0 ? 0u : (0xffffffffu << (32 - 8 * level));
    for (int i = threadIdx.x; i < 256; i += kThreads) {
      sh.dhist[i] = 0.0;
      sh.chist[i] = 0;
    }
    __syncthreads();
    for_each_logit(r.l, r.vocab, [&](int i, float v) {
      const uint32_t key = order_key(v);
      double x = 0.0, m = 0.0;
      // The prefix test before the f64 division: most elements leave there.
      const bool take = i < r.vocab && (key & mask) == prefix && in_set(v) && r.kept(v, x);
      if (take) m = r.mass(x);
      add_to_bin(sh, take, (key >> shift) & 255u, m, true);
    });
    merge_bins(sh, true);
    if (threadIdx.x == 0) {
      if (level == 0 && fraction > 0.0) {
        double mass = 0.0;
        for (int d = 255; d >= 0; --d) mass += sh.row_dhist[d];
        sh.set_mass = mass;
        target = fraction * mass;  // thread 0 alone decides, so only its copy matters
      }
      double cum = level == 0 ? 0.0 : sh.d1;
      int chosen = -1, last = -1;
      double chosen_above = 0.0, last_above = 0.0;
      for (int d = 255; d >= 0; --d) {
        if (sh.row_chist[d] == 0) continue;
        const double next = cum + sh.row_dhist[d];
        if (strict ? next > target : next >= target) {
          chosen = d;
          chosen_above = cum;
          break;
        }
        last = d;
        last_above = cum;
        cum = next;
      }
      // Below the first pass the bins' sums can round a hair under what the pass above promised:
      // then the lowest bin holds the answer.
      if (chosen < 0 && level > 0) {
        chosen = last;
        chosen_above = last_above;
      }
      sh.i2 = chosen >= 0;
      if (chosen >= 0) {
        sh.u0 = prefix | (uint32_t(chosen) << shift);
        sh.d1 = chosen_above;
        sh.i1 = sh.row_chist[chosen];
      }
    }
    __syncthreads();
    if (level == 0 && set_mass) *set_mass = sh.set_mass;
    if (!sh.i2) return false;
    prefix = sh.u0;
  }
  K = prefix;
  above = sh.d1;
  count = sh.i1;
  __syncthreads();
  return true;
}

// Every CTA of the row gets `index`: one lane of one CTA writes it into each CTA's copy.
__device__ __forceinline__ void tell_every_cta(int Shared::*field, Shared& sh, int index) {
  for (int c = 0; c < row_ctas(); ++c) on_rank(&sh, c)->*field = index;
}

// Warp w of CTA `rank` owns the contiguous segment rank * kWarps + w (of kWarps * n, 32-aligned).
struct Segment {
  int global_warp, warps, begin, end;
  __device__ explicit Segment(int vocab) {
    warps = kWarps * row_ctas();
    global_warp = row_rank() * kWarps + int(threadIdx.x >> 5);
    const int seg = ((vocab + warps - 1) / warps + 31) / 32 * 32;
    begin = global_warp * seg;
    end = min(vocab, begin + seg);
  }
};

// The j-th (1-based) index, in id order, of the kept elements with key == K.
__device__ int nth_with_key(const Row& r, uint32_t K, int j, Shared& sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const Segment segment(r.vocab);
  const int begin = segment.begin, end = segment.end;
  auto is = [&](int i) {
    if (i >= end) return false;
    const float v = r.l[i];
    double x;
    return order_key(v) == K && r.kept(v, x);
  };
  constexpr int kTiles = 4;  // 32-element tiles whose loads are in flight together
  int count = 0;
  for (int base = begin; base < end; base += 32 * kTiles) {
    bool hit[kTiles];
#pragma unroll
    for (int q = 0; q < kTiles; ++q) hit[q] = is(base + 32 * q + lane);
#pragma unroll
    for (int q = 0; q < kTiles; ++q) count += __popc(__ballot_sync(kFull, hit[q]));
  }
  if (lane == 0) sh.wint[w] = count;
  row_sync();
  if (threadIdx.x == 0) {
    int cum = 0, sel = -1;
    for (int v = 0; v < segment.warps; ++v) {
      const int c = on_rank(sh.wint, v / kWarps)[v % kWarps];
      if (cum + c >= j) {
        sel = v;
        break;
      }
      cum += c;
    }
    sh.i0 = sel;
    sh.i1 = j - cum;
    sh.i2 = -1;
  }
  row_sync();  // every CTA has read the counts; i2 = -1 everywhere before the finder writes
  if (segment.global_warp == sh.i0) {
    int rem = sh.i1;
    bool found = false;
    for (int base = begin; base < end && !found; base += 32 * kTiles) {
      bool hit[kTiles];
#pragma unroll
      for (int q = 0; q < kTiles; ++q) hit[q] = is(base + 32 * q + lane);
#pragma unroll
      for (int q = 0; q < kTiles; ++q) {
        const unsigned b = __ballot_sync(kFull, hit[q]);
        if (!found && rem <= __popc(b)) {
          if (hit[q] && __popc(b & ((1u << lane) - 1u)) == rem - 1) tell_every_cta(&Shared::i2, sh, base + 32 * q + lane);
          found = true;
        }
        if (!found) rem -= __popc(b);
      }
    }
  }
  row_sync();
  return sh.i2;
}

// Inverse CDF in id order over the kept tokens (the CPU's order when top_p is off): each warp
// scans its contiguous segment 32 at a time; the same arithmetic twice, so the segment that the
// prefix sums say holds the crossing finds it. Past the end: the last kept token.
__device__ int draw_in_id_order(const Row& r, double u, Shared& sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const Segment segment(r.vocab);
  const int begin = segment.begin, end = segment.end;
  auto scan_tile = [&](int base, int& last) {  // inclusive prefix of the kept masses of one tile
    const int i = base + lane;
    double mass = 0.0, x;
    if (i < end && r.kept(r.l[i], x)) {
      mass = r.mass(x);
      last = i;
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(kFull, mass, o);
      if (lane >= o) mass += y;
    }
    return mass;
  };
  double carry = 0.0;
  int last = -1;
  for (int base = begin; base < end; base += 32) carry += __shfl_sync(kFull, scan_tile(base, last), 31);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(kFull, last, o));
  if (lane == 0) {
    sh.wsum[w] = carry;
    sh.wint[w] = last;
  }
  row_sync();
  if (threadIdx.x == 0) {
    double total = 0.0;
    int last_kept = -1;
    for (int v = 0; v < segment.warps; ++v) {
      total += on_rank(sh.wsum, v / kWarps)[v % kWarps];
      last_kept = max(last_kept, on_rank(sh.wint, v / kWarps)[v % kWarps]);
    }
    const double target = u * total;
    double excl = 0.0;
    int sel = -1;
    for (int v = 0; v < segment.warps; ++v) {
      const double next = excl + on_rank(sh.wsum, v / kWarps)[v % kWarps];
      if (next > target) {
        sel = v;
        break;
      }
      excl = next;
    }
    sh.i0 = sel;
    sh.d0 = excl;
    sh.d1 = target;
    sh.i2 = last_kept;  // the answer when nothing crosses
  }
  row_sync();  // every CTA has read the sums; i2 holds the default everywhere
  if (segment.global_warp == sh.i0) {
    const double excl = sh.d0, target = sh.d1;
    double c = 0.0;
    int unused = -1;
    for (int base = begin; base < end; base += 32) {
      const double incl = scan_tile(base, unused);
      const unsigned b = __ballot_sync(kFull, base + lane < end && excl + (c + incl) > target);
      if (b) {
        if (lane == 0) tell_every_cta(&Shared::i2, sh, base + __ffs(b) - 1);
        break;
      }
      c += __shfl_sync(kFull, incl, 31);
    }
  }
  row_sync();
  return sh.i2;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleRowsParams p) {
  __shared__ Shared sh;
  const int row_index = int(blockIdx.x) / row_ctas();  // 1-D clusters: consecutive CTAs
  const float* row = p.logits + int64_t(row_index) * p.vocab;
  const float temperature = p.temperature[row_index];

  // Pass 0: max and NaN, for every row (the flag covers greedy rows too).
  float vmax = -INFINITY;
  int nan_seen = 0;
  for_each_logit(row, p.vocab, [&](int i, float v) {
    nan_seen |= i < p.vocab && isnan(v);
    vmax = fmaxf(vmax, v);  // NaN ignored
  });
  vmax = warp_max(vmax);
  nan_seen = __any_sync(kFull, nan_seen);
  if ((threadIdx.x & 31) == 0) {
    sh.wsum[threadIdx.x >> 5] = vmax;
    sh.wint[threadIdx.x >> 5] = nan_seen;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    int n = 0;
    for (int w = 0; w < kWarps; ++w) {
      m = fmaxf(m, float(sh.wsum[w]));
      n |= sh.wint[w];
    }
    sh.slot_f = m;
    sh.slot_i = n;
  }
  row_sync();
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    int n = 0;
    for (int r = 0; r < row_ctas(); ++r) {
      m = fmaxf(m, *on_rank(&sh.slot_f, r));
      n |= *on_rank(&sh.slot_i, r);
    }
    sh.f0 = m;
    sh.i0 = n;
    if (row_rank() == 0 && (n || m == -INFINITY) && p.invalid_row_flag) *p.invalid_row_flag = 1;
  }
  row_sync();
  const float lmax = sh.f0;
  int token = 0;
  if (!(temperature > 0.0f)) {
    if (row_rank() == 0) token = row_argmax(row, p.vocab);  // the whole row, in one CTA
  } else if (lmax == -INFINITY) {
    token = 0;  // nothing to sample from (the CPU throws); flagged above
  } else {
    Row r{row, p.vocab, double(temperature), double(lmax) / double(temperature), -INFINITY, 0u};
    const float min_p = p.min_p[row_index], top_p = p.top_p[row_index];
    const int top_k = p.top_k[row_index];
    if (min_p > 0.0f) r.floor = r.m + log(double(min_p));
    double u = p.uniform_f64 ? p.uniform_f64[row_index] : double(p.uniform[row_index]);
    if (!(u >= 0.0)) u = 0.0;
    if (u >= 1.0) u = 0x1.fffffffffffffp-1;
    if (top_k > 0) {
      int n = 0;
      double x;
      // r.kept(v, x) with no top_k key yet, without the division when min_p is off (NaN past the end: not kept).
      for_each_logit(row, p.vocab, [&](int, float v) {
        n += r.floor == -INFINITY ? !isnan(v) && v != -INFINITY : r.kept(v, x);
      });
      n = row_sum_int(n, sh);
      if (top_k < n) r.topk_key = kth_largest_key(r, top_k, sh);
    }
    if (!(top_p < 1.0f)) {
      token = draw_in_id_order(r, u, sh);
    } else {
      // The cut: limit = top_p * the kept mass, which the search's first pass sums.
      uint32_t kc = 0;
      double kept_mass = 0.0, above_c = 0.0, e_c = 0.0;
      int n_c = 0, n_take = 0;
      const bool cut =
          mass_search(r, [](float) { return true; }, 0.0, false, sh, kc, above_c, n_c, double(top_p), &kept_mass);
      const double limit = double(top_p) * kept_mass;
      double mass_p = kept_mass;
      if (cut) {
        // The ties at the cut key, in id order, while the mass before each is < limit.
        e_c = r.mass(double(key_value(kc)) / r.temperature);
        if (threadIdx.x == 0) {
          double before = above_c;
          int take = 0;
          while (take < n_c && before < limit) {
            before += e_c;
            ++take;
          }
          sh.d0 = before;
          sh.i0 = take;
        }
        __syncthreads();
        mass_p = sh.d0;
        n_take = sh.i0;
        __syncthreads();
      }
      const double target = u * mass_p;
      uint32_t ks = 0;
      double above_s = 0.0;
      int n_s = 0;
      const bool above_cut = mass_search(r, [kc](float v) { return order_key(v) > kc; }, target, true, sh, ks, above_s, n_s);
      uint32_t key = ks;
      double start = above_s, e = 0.0;
      int n_avail = n_s;
      if (!above_cut) {  // among the ties kept at the cut
        key = kc;
        start = above_c;
        n_avail = n_take;
      }
      if (n_avail == 0) {
        token = row_argmax(row, p.vocab);  // rounding-only corner: nothing reached
      } else {
        e = r.mass(double(key_value(key)) / r.temperature);
        if (threadIdx.x == 0) {
          double cum = start;
          int j = 0;
          while (j < n_avail) {
            cum += e;
            ++j;
            if (cum > target) break;
          }
          sh.i0 = j;
        }
        __syncthreads();
        const int j = sh.i0;
        __syncthreads();
        token = nth_with_key(r, key, j, sh);
        if (token < 0) token = row_argmax(row, p.vocab);  // cannot happen: the ties were counted
      }
    }
  }
  if (threadIdx.x == 0 && row_rank() == 0) p.out[row_index] = token;
  row_sync();  // no CTA leaves while another may still read its shared memory
}

}  // namespace

void argmax_rows(const float* logits, int n_rows, int vocab, int32_t* out, cudaStream_t s) {
  if (!logits) kernel_fail("argmax_rows: logits is null (expected a device pointer to f32 [n_rows, vocab])");
  if (!out) kernel_fail("argmax_rows: out is null (expected a device pointer to int32 [n_rows])");
  if (n_rows < 0) kernel_fail("argmax_rows: n_rows must be >= 0, found ", n_rows);
  if (vocab <= 0) kernel_fail("argmax_rows: vocab must be > 0, found ", vocab);
  if (n_rows == 0) return;
  launch_pdl(argmax_kernel, dim3(n_rows), dim3(kArgmaxThreads), 0, s, logits, vocab, out);
  LS_CUDA_CHECK_LAUNCH("argmax_kernel");
}

size_t sample_rows_workspace_bytes(int /*n_rows*/, int /*vocab*/) { return 0; }

int sample_rows_ctas_per_row(int n_rows, int vocab, int requested) {
  if (requested > 0) return std::min(requested, kMaxCtasPerRow);
  static const int sms = [] {
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return 132;
    return count;
  }();
  // Double while the grid still fits the SMs once and each CTA keeps at least one chunk.
  int ctas = 1;
  while (2 * ctas <= kMaxCtasPerRow && int64_t(n_rows) * 2 * ctas <= sms && int64_t(2 * ctas) * kChunk <= vocab) ctas *= 2;
  return ctas;
}

void sample_rows(const SampleRowsParams& p, cudaStream_t s) {
  const char* what = nullptr;
  if (!p.logits) what = "logits";
  else if (!p.temperature) what = "temperature";
  else if (!p.top_k) what = "top_k";
  else if (!p.top_p) what = "top_p";
  else if (!p.min_p) what = "min_p";
  else if (!p.uniform && !p.uniform_f64) what = "uniform (and uniform_f64)";
  else if (!p.out) what = "out";
  if (what) kernel_fail("sample_rows: ", what, " is null (expected a device pointer of n_rows values)");
  if (p.n_rows < 0) kernel_fail("sample_rows: n_rows must be >= 0, found ", p.n_rows);
  if (p.vocab <= 0) kernel_fail("sample_rows: vocab must be > 0, found ", p.vocab);
  const size_t need = sample_rows_workspace_bytes(p.n_rows, p.vocab);
  if (p.workspace_bytes < need || (need > 0 && !p.workspace))
    kernel_fail("sample_rows: workspace needs ", need, " bytes, found ", p.workspace_bytes,
                p.workspace ? "" : " (null)");
  if (p.ctas_per_row < 0 || p.ctas_per_row > kMaxCtasPerRow)
    kernel_fail("sample_rows: ctas_per_row must be 0 (auto) to ", kMaxCtasPerRow, ", found ", p.ctas_per_row);
  if (p.n_rows == 0) return;
  const int ctas = sample_rows_ctas_per_row(p.n_rows, p.vocab, p.ctas_per_row);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(p.n_rows) * unsigned(ctas));
  config.blockDim = dim3(kThreads);
  config.stream = s;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = unsigned(ctas);
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  LS_CUDA_CHECK(cudaLaunchKernelEx(&config, sample_rows_kernel, p));
}

}  // namespace latentserve::cuda
