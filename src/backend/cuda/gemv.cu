#include "backend/cuda/gemv.h"

#include <type_traits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"
#include "backend/cuda/rope_math.cuh"

namespace latentserve::cuda {
namespace {

constexpr int kWarps = 4;

// grid: ceil(outputs / (outputs per CTA)). kSplit 1: warp w of CTA b owns kRowsPerWarp rows of w
// from (b * kWarps + w) * kRowsPerWarp (SwiGLU: half of them from each half of w), and lane l
// reads 16-byte chunks l, l + 32, ... of each row (k / 8 chunks per row). kSplit == kWarps: the
// CTA's warps share one group of rows and warp p reads the chunks of blocks p, p + kSplit, ...
// of 32 * kUnroll chunks, the partial sums meeting in shared memory: kSplit times the warps (and
// loads in flight) for a matrix whose rows alone leave the SMs short of warps (o, q|k|v, down).
template <typename OutT>
__device__ __forceinline__ OutT from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// What the kernel does around the product (GemvFusion in gemv.h).
constexpr int kOutStore = 0, kOutAddToResidual = 1, kOutSwiGlu = 2, kOutRopeKv = 3;

// The RoPE epilogue's rows: output L of a q|k|v row is logical; pairs of logical outputs (2i,
// 2i + 1) of a head's rotated part are the rotated pairs, so a warp (an even number of rows from
// an even L) always holds whole pairs. The weight row (and y element) of L: interleaved pairs
// are (2i, 2i + 1) already; neox pairs are (i, i + rotary_dim / 2).
// Whether logical output L is in a q or k head's rotated part.
__device__ __forceinline__ bool rope_rotated(const RopeKvWriteParams& p, int L) {
  const int head = L / p.head_dim;
  return p.apply_rope && head < p.n_head + p.n_head_kv && L - head * p.head_dim < p.rotary_dim;
}
__device__ __forceinline__ int rope_weight_row(const RopeKvWriteParams& p, int L) {
  if (p.interleaved || !rope_rotated(p, L)) return L;
  const int head = L / p.head_dim, e = L - head * p.head_dim;
  return head * p.head_dim + (e >> 1) + (e & 1) * (p.rotary_dim / 2);
}

// What the RoPE epilogue needs besides the product, per token of the step: loaded after the
// PDL wait and before the k loop, so the loads are in flight while the weights stream.
template <int M, int kPairs>
struct RopeOperands {
  float position[M];
  int64_t slot[M];            // -1: padding (or write_kv off): no K/V store
  float inv_freq[M][kPairs];  // of the warp's pairs (0 where a pair is not rotated)
  __device__ __forceinline__ void load(const RopeKvWriteParams& p, int col0) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      position[i] = float(p.positions[i]);
      slot[i] = p.write_kv ? p.slot_mapping[i] : -1;
      const float* freq = p.apply_rope && p.rotary_dim > 0 ? rope_math::inv_freq_row(p, i) : nullptr;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int L = col0 + 2 * j;
        inv_freq[i][j] = freq && rope_rotated(p, L) ? freq[(L % p.head_dim) / 2] : 0.0f;
      }
    }
  }
};

// rope_and_write_kv's work on this warp's outputs (logical col0 ...; weight rows / y elements
// wrow), with the same arithmetic: the product rounded to bf16 as the store mode writes it,
// rotated in f32, q and k stored rotated (round to nearest), the cache given the rotated f32.
template <int M, int kRowsPerWarp, typename OutT, typename Biased>
__device__ __forceinline__ void rope_kv_epilogue(const RopeKvWriteParams& p, const RopeOperands<M, kRowsPerWarp / 2>& ops,
                                                 int col0, int n_out, const int (&wrow)[kRowsPerWarp], OutT* y,
                                                 const Biased& biased) {
  const int hd = p.head_dim, nh = p.n_head, nkv = p.n_head_kv;
  const rope_math::KvStore store_k = rope_math::k_store(p.kv), store_v = rope_math::v_store(p.kv);
#pragma unroll
  for (int j = 0; j < kRowsPerWarp / 2; ++j) {
    const int L = col0 + 2 * j;  // even, and n_out is even: L + 1 < n_out too
    if (L >= n_out) break;
    const int head = L / hd, e0 = wrow[2 * j] - head * hd, e1 = wrow[2 * j + 1] - head * hd;
    const bool rotated = rope_rotated(p, L);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      float a = bf16_to_f32(__float2bfloat16(biased(2 * j, i))), b = bf16_to_f32(__float2bfloat16(biased(2 * j + 1, i)));
      if (rotated) {
        const float2 cs = rope_math::cos_sin(p, ops.position[i], ops.inv_freq[i][j]);
        const float2 r = rope_math::rotate(a, b, cs.x, cs.y);
        a = r.x;
        b = r.y;
      }
      y[int64_t(i) * n_out + wrow[2 * j]] = __float2bfloat16_rn(a);
      y[int64_t(i) * n_out + wrow[2 * j + 1]] = __float2bfloat16_rn(b);
      if (ops.slot[i] < 0 || head < nh) continue;  // q, or a padding token
      const rope_math::KvSlot kv = rope_math::kv_slot(p, ops.slot[i]);
      if (head < nh + nkv) {
        store_k(kv(head - nh) + e0, head - nh, a);
        store_k(kv(head - nh) + e1, head - nh, b);
      } else {
        store_v(kv(head - nh - nkv) + e0, head - nh - nkv, a);
        store_v(kv(head - nh - nkv) + e1, head - nh - nkv, b);
      }
    }
  }
}

// The store, add-to-residual and SwiGLU epilogues: each output as the unfused kernels would
// round it, y = OutT(acc + bias) first.
template <int M, int kHalf, int kOut, typename OutT, typename Biased>
__device__ __forceinline__ void store_outputs(int col0, int n, int n_out, OutT* y, const GemvFusion& f,
                                              const Biased& biased) {
#pragma unroll
  for (int r = 0; r < kHalf; ++r) {
    const int col = col0 + r;
    if (col >= n_out) break;
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if constexpr (kOut == kOutStore) {
        y[int64_t(i) * n + col] = from_f32<OutT>(biased(r, i));
      } else if constexpr (kOut == kOutAddToResidual) {
        f.add_to_residual[int64_t(i) * n + col] += bf16_to_f32(__float2bfloat16(biased(r, i)));
      } else {
        const float g = bf16_to_f32(__float2bfloat16(biased(r, i)));
        const float u = bf16_to_f32(__float2bfloat16(biased(r + kHalf, i)));
        y[int64_t(i) * n_out + col] = from_f32<OutT>(silu_times(g, u));
      }
    }
  }
}

template <int M, int kRowsPerWarp, int kUnroll, int kSplit, typename OutT, bool kNormIn, int kOut>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w,
                                                           OutT* __restrict__ y, const __nv_bfloat16* bias,
                                                           int n, int k_chunks, GemvFusion f) {
  // kSplit == kWarps keeps every warp of a CTA on the same rows, so the early exit below is
  // taken by the whole CTA or none of it (the partial sums meet at a barrier).
  static_assert(kSplit == 1 || kSplit == kWarps, "k is split across all warps of a CTA or none");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_id = blockIdx.x * (kWarps / kSplit) + warp / kSplit;  // the row group
  const int part = warp % kSplit;                                      // which blocks of k it reads
  const int c_first = lane + part * 32 * kUnroll, c_step = 32 * kUnroll * kSplit;
  // The weight rows this warp works on. SwiGLU: kRowsPerWarp / 2 columns of the activation,
  // their gate rows then their up rows (n / 2 apart), so the epilogue has both halves.
  constexpr int kHalf = kOut == kOutSwiGlu ? kRowsPerWarp / 2 : kRowsPerWarp;
  const int n_out = kOut == kOutSwiGlu ? n / 2 : n;  // outputs per row of x
  const int col0 = warp_id * kHalf;                  // this warp's first output
  int wrow[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int col = min(col0 + r % kHalf, n_out - 1);  // past the end: read the last row, store nothing
    wrow[r] = kOut == kOutSwiGlu && r >= kHalf ? n_out + col : kOut == kOutRopeKv ? rope_weight_row(f.rope_kv, col) : col;
  }
  float acc[kRowsPerWarp][M];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;
  const uint4* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) wr[r] = w + int64_t(wrow[r]) * k_chunks;

  // The first weight loads go out before waiting on the kernel that produces x (programmatic
  // dependent launch): the weights do not depend on it, so their latency hides under its tail.
  uint4 wv[kUnroll][kRowsPerWarp];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int c = c_first + u * 32;
      wv[u][r] = (col0 < n_out && c < k_chunks) ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);
    }
  wait_for_previous_kernel();
  if (col0 >= n_out) return;
  RopeOperands<M, kOut == kOutRopeKv ? kRowsPerWarp / 2 : 1> rope;
  if constexpr (kOut == kOutRopeKv) {
    if (lane == 0 && part == 0) rope.load(f.rope_kv, col0);  // the thread that runs the epilogue
  }

  // RMSNorm in front, folded into the product: y = (1 / rms) * sum_k w_k (r_k g_k), with
  // r the f32 residual row and g the norm weight; each warp reads the whole row of r anyway,
  // so it also sums r^2 on the way and scales at the end (no prologue, no barrier).
  const float4* res = reinterpret_cast<const float4*>(f.norm_residual);
  const uint4* nw = static_cast<const uint4*>(f.norm_weight);
  float sum_sq[M];
#pragma unroll
  for (int i = 0; i < M; ++i) sum_sq[i] = 0.0f;

  for (int c0 = c_first; c0 < k_chunks; c0 += c_step) {
    if (c0 != c_first) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)  // all weight loads of this iteration in flight together
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const int c = c0 + u * 32;
          wv[u][r] = c < k_chunks ? __ldcs(wr[r] + c) : make_uint4(0, 0, 0, 0);  // streamed: read once
        }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * 32;
      if (c >= k_chunks) break;
      float g[8];
      if constexpr (kNormIn) bf16x8_to_f32(__ldg(nw + c), g);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float xf[8];
        if constexpr (kNormIn) {
          const float4 a = __ldg(res + (int64_t(i) * k_chunks + c) * 2), b = __ldg(res + (int64_t(i) * k_chunks + c) * 2 + 1);
          const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sum_sq[i] = fmaf(v[e], v[e], sum_sq[i]);
            xf[e] = v[e] * g[e];
          }
        } else {
          bf16x8_to_f32(__ldg(x + int64_t(i) * k_chunks + c), xf);
        }
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          float wf[8];
          bf16x8_to_f32(wv[u][r], wf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r][i] = fmaf(wf[j], xf[j], acc[r][i]);
        }
      }
    }
  }
  // Every load is done: the next kernel (a norm, RoPE, SwiGLU) may launch and wait for us. Not
  // at the start: its CTAs would sit on the slots this grid's later waves need.
  allow_dependent_launch();
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = warp_sum(acc[r][i]);
#pragma unroll
  for (int i = 0; i < M; ++i) sum_sq[i] = kNormIn ? warp_sum(sum_sq[i]) : 0.0f;
  if constexpr (kSplit > 1) {  // the parts' sums, added in part order by warp 0's lane 0
    __shared__ float part_acc[kSplit][kRowsPerWarp][M], part_sq[kSplit][M];
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) part_acc[part][r][i] = acc[r][i];
        part_sq[part][i] = sum_sq[i];
      }
    }
    __syncthreads();
    if (warp != 0 || lane != 0) return;
#pragma unroll
    for (int p = 1; p < kSplit; ++p)
#pragma unroll
      for (int i = 0; i < M; ++i) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) acc[r][i] += part_acc[p][r][i];
        sum_sq[i] += part_sq[p][i];
      }
  }
  if constexpr (kNormIn) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float inv_rms = rsqrtf(sum_sq[i] / float(k_chunks * 8) + f.norm_eps);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) acc[r][i] *= inv_rms;
    }
  }
  if (lane != 0) return;
  const auto biased = [&](int r, int i) { return acc[r][i] + (bias ? bf16_to_f32(bias[wrow[r]]) : 0.0f); };
  if constexpr (kOut == kOutRopeKv) {
    rope_kv_epilogue<M, kRowsPerWarp>(f.rope_kv, rope, col0, n_out, wrow, y, biased);
  } else {
    store_outputs<M, kHalf, kOut>(col0, n, n_out, y, f, biased);
  }
}

// The kernels a launch can pick: the plain product (bf16 or f32 out), and the three fusions of
// the decode step (bf16 out).
enum class Mode { Plain, NormStore, AddToResidual, NormSwiGlu, NormRopeKv };

template <int M, int R, int U, int S, typename OutT, bool kNormIn, int kOut>
void launch_one(const void* x, const void* w, void* y, int n, int k, const void* bias, const GemvFusion& f,
                cudaStream_t s) {
  auto kernel = gemv_kernel<M, R, U, S, OutT, kNormIn, kOut>;
  const int outputs_per_cta = kWarps / S * (kOut == kOutSwiGlu ? R / 2 : R);
  const int outputs = kOut == kOutSwiGlu ? n / 2 : n;
  launch_pdl(kernel, dim3(unsigned((outputs + outputs_per_cta - 1) / outputs_per_cta)), dim3(kWarps * 32), 0, s,
             static_cast<const uint4*>(x), static_cast<const uint4*>(w), static_cast<OutT*>(y),
             static_cast<const __nv_bfloat16*>(bias), n, k / 8, f);
}

template <int M, int R, int U, int S, typename OutT>
void launch_mode(Mode mode, const void* x, const void* w, void* y, int n, int k, const void* bias, const GemvFusion& f,
                 cudaStream_t s) {
  if constexpr (std::is_same_v<OutT, float>) {
    launch_one<M, R, U, S, float, false, kOutStore>(x, w, y, n, k, bias, f, s);  // the fusions write bf16 (checked)
  } else {
    switch (mode) {
      case Mode::Plain: launch_one<M, R, U, S, OutT, false, kOutStore>(x, w, y, n, k, bias, f, s); break;
      case Mode::NormStore: launch_one<M, R, U, S, OutT, true, kOutStore>(x, w, y, n, k, bias, f, s); break;
      case Mode::AddToResidual: launch_one<M, R, U, S, OutT, false, kOutAddToResidual>(x, w, y, n, k, bias, f, s); break;
      case Mode::NormSwiGlu:
        if constexpr (R % 2 == 0) launch_one<M, R, U, S, OutT, true, kOutSwiGlu>(x, w, y, n, k, bias, f, s);
        break;  // odd R: refused before the launch
      case Mode::NormRopeKv:
        if constexpr (R % 2 == 0) launch_one<M, R, U, S, OutT, true, kOutRopeKv>(x, w, y, n, k, bias, f, s);
        break;
    }
  }
}

template <int M, typename OutT>
void launch_config(GemvConfig config, Mode mode, const void* x, const void* w, void* y, int n, int k, const void* bias,
                   const GemvFusion& f, cudaStream_t s) {
  switch (config) {
    case GemvConfig::Rows4Unroll4: launch_mode<M, 4, 4, 1, OutT>(mode, x, w, y, n, k, bias, f, s); break;
    case GemvConfig::Rows4Unroll8: launch_mode<M, 4, 8, 1, OutT>(mode, x, w, y, n, k, bias, f, s); break;
    case GemvConfig::Rows2Unroll8: launch_mode<M, 2, 8, 1, OutT>(mode, x, w, y, n, k, bias, f, s); break;
    case GemvConfig::Rows1Unroll8: launch_mode<M, 1, 8, 1, OutT>(mode, x, w, y, n, k, bias, f, s); break;
    case GemvConfig::Rows4Unroll4Split4: launch_mode<M, 4, 4, kWarps, OutT>(mode, x, w, y, n, k, bias, f, s); break;
    case GemvConfig::Rows2Unroll8Split4: launch_mode<M, 2, 8, kWarps, OutT>(mode, x, w, y, n, k, bias, f, s); break;
  }
}

template <typename OutT>
void launch(GemvConfig config, Mode mode, const void* x, const void* w, void* y, int64_t m, int n, int k,
            const void* bias, const GemvFusion& f, cudaStream_t s) {
  switch (m) {
    case 1: launch_config<1, OutT>(config, mode, x, w, y, n, k, bias, f, s); break;
    case 2: launch_config<2, OutT>(config, mode, x, w, y, n, k, bias, f, s); break;
    case 3: launch_config<3, OutT>(config, mode, x, w, y, n, k, bias, f, s); break;
    default: launch_config<4, OutT>(config, mode, x, w, y, n, k, bias, f, s); break;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* gemv_config_name(GemvConfig config) {
  switch (config) {
    case GemvConfig::Rows4Unroll4: return "r4u4";
    case GemvConfig::Rows4Unroll8: return "r4u8";
    case GemvConfig::Rows2Unroll8: return "r2u8";
    case GemvConfig::Rows1Unroll8: return "r1u8";
    case GemvConfig::Rows4Unroll4Split4: return "r4u4s4";
    case GemvConfig::Rows2Unroll8Split4: return "r2u8s4";
  }
  return "?";
}

int gemv_config_rows(GemvConfig config) {
  switch (config) {
    case GemvConfig::Rows4Unroll4:
    case GemvConfig::Rows4Unroll8:
    case GemvConfig::Rows4Unroll4Split4: return 4;
    case GemvConfig::Rows2Unroll8:
    case GemvConfig::Rows2Unroll8Split4: return 2;
    case GemvConfig::Rows1Unroll8: return 1;
  }
  return 1;
}

bool gemv_supported(const void* x, const void* w, const void* y, int64_t m, int64_t k) {
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && k > 0 && aligned16(x) && aligned16(w) && aligned16(y);
}

void gemv_bf16(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias,
               cudaStream_t s, GemvConfig config) {
  if (!x || !w || !y) kernel_fail("gemv_bf16: x, w and y must be device pointers, one is null");
  if (!gemv_supported(x, w, y, m, k))
    kernel_fail("gemv_bf16: needs 1 <= m <= ", kGemvMaxRows, ", k % 8 == 0 and 16-byte aligned x, w, y; found m ", m,
                ", k ", k);
  if (n <= 0 || n > (int64_t(1) << 30) || k > (int64_t(1) << 30)) kernel_fail("gemv_bf16: n must be in [1, 2^30], found ", n);
  if (y_f32)
    launch<float>(config, Mode::Plain, x, w, y, m, int(n), int(k), bias, GemvFusion{}, s);
  else
    launch<__nv_bfloat16>(config, Mode::Plain, x, w, y, m, int(n), int(k), bias, GemvFusion{}, s);
  LS_CUDA_CHECK_LAUNCH("gemv_kernel");
}

void gemv_bf16_fused(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, const void* bias,
                     const GemvFusion& f, cudaStream_t s, GemvConfig config) {
  const bool norm = f.norm_residual != nullptr, add = f.add_to_residual != nullptr;
  if (!w) kernel_fail("gemv_bf16_fused: w is null (expected a device pointer to bf16 [n, k])");
  if (m < 1 || m > kGemvMaxRows) kernel_fail("gemv_bf16_fused: m must be in [1, ", kGemvMaxRows, "], found ", m);
  if (k <= 0 || k % 8 != 0) kernel_fail("gemv_bf16_fused: k must be a positive multiple of 8, found ", k);
  if (n <= 0 || n > (int64_t(1) << 30)) kernel_fail("gemv_bf16_fused: n must be in [1, 2^30], found ", n);
  if (!aligned16(w) || (x && !aligned16(x)) || (y && !aligned16(y)))
    kernel_fail("gemv_bf16_fused: x, w and y must be 16-byte aligned");
  Mode mode;
  if (norm && f.swiglu && !f.rope_kv_write && !add) {
    mode = Mode::NormSwiGlu;
    if (n % 2 != 0) kernel_fail("gemv_bf16_fused: SwiGLU needs [gate | up] rows (n even), found n ", n);
    if (gemv_config_rows(config) % 2 != 0)
      kernel_fail("gemv_bf16_fused: SwiGLU pairs gate and up rows in a warp; configuration ", gemv_config_name(config),
                  " has ", gemv_config_rows(config), " row per warp");
  } else if (norm && f.rope_kv_write && !f.swiglu && !add) {
    mode = Mode::NormRopeKv;
    validate_rope_kv_write("gemv_bf16_fused (rope_kv)", f.rope_kv);
    const RopeKvWriteParams& p = f.rope_kv;
    if (gemv_config_rows(config) % 2 != 0)
      kernel_fail("gemv_bf16_fused: the RoPE epilogue takes whole rotated pairs in a warp; configuration ",
                  gemv_config_name(config), " has ", gemv_config_rows(config), " row per warp");
    if (p.head_dim % 2 != 0) kernel_fail("gemv_bf16_fused: the RoPE epilogue needs an even rope_kv.head_dim, found ", p.head_dim);
    if (n != int64_t(p.n_head + 2 * p.n_head_kv) * p.head_dim)
      kernel_fail("gemv_bf16_fused: with rope_kv, n must be (n_head + 2 n_head_kv) * head_dim = ",
                  int64_t(p.n_head + 2 * p.n_head_kv) * p.head_dim, ", found ", n);
    if (p.qkv != y || p.qkv_token_stride != n)
      kernel_fail("gemv_bf16_fused: rope_kv.qkv must be y with qkv_token_stride n = ", n, " (found ",
                  p.qkv == y ? "y" : "another pointer", ", stride ", p.qkv_token_stride, ")");
    if (p.n_tokens != m) kernel_fail("gemv_bf16_fused: rope_kv.n_tokens must be m = ", m, ", found ", p.n_tokens);
  } else if (norm && !f.swiglu && !add) {
    mode = Mode::NormStore;
  } else if (add && !norm && !f.swiglu && !f.rope_kv_write) {
    mode = Mode::AddToResidual;
  } else {
    kernel_fail("gemv_bf16_fused: takes norm -> store, norm -> SwiGLU, norm -> RoPE + K/V write or add-to-residual; "
                "found norm_residual ", norm ? "set" : "null", ", swiglu ", f.swiglu, ", rope_kv_write ", f.rope_kv_write,
                ", add_to_residual ", add ? "set" : "null");
  }
  if (norm) {
    if (!f.norm_weight) kernel_fail("gemv_bf16_fused: norm_weight is null (expected bf16 [k] beside norm_residual)");
    if (!aligned16(f.norm_residual) || !aligned16(f.norm_weight))
      kernel_fail("gemv_bf16_fused: norm_residual and norm_weight must be 16-byte aligned");
    if (!(f.norm_eps >= 0.0f)) kernel_fail("gemv_bf16_fused: norm_eps must be >= 0, found ", f.norm_eps);
  } else if (!x) {
    kernel_fail("gemv_bf16_fused: x is null (expected a device pointer to bf16 [m, k] when nothing is normed in front)");
  }
  if (!add && !y) kernel_fail("gemv_bf16_fused: y is null (expected a device pointer to bf16 output)");
  launch<__nv_bfloat16>(config, mode, x, w, y, m, int(n), int(k), bias, f, s);
  LS_CUDA_CHECK_LAUNCH("gemv_kernel (fused)");
}

}  // namespace latentserve::cuda
