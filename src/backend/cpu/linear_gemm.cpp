// Prefill-path GEMM: y[n_tokens, out] = x[n_tokens, in] · W[out, in]ᵀ + bias, f32.
//
// Both libraries multiply row-major x by the weight rows as stored (W is read as the
// column-major [in, out] matrix Wᵀ): no transposed copy. Non-f32 weights go through
// panels of rows widened to f32 just before the library multiplies each panel into the
// matching columns of y, so no f32 copy of a weight matrix exists.
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <dnnl.hpp>
#include <vector>

#include "backend/cpu/linear_gemm.h"

namespace latentserve::cpu {
namespace {

// f32 bytes of one converted weight panel: large enough for the library to reach full
// speed on it, small enough to stay in L2/L3 while it is multiplied.
constexpr int64_t kPanelBytes = int64_t(2) << 20;

int64_t panel_rows(int64_t in_features, int64_t out_features) {
  const int64_t rows = std::max<int64_t>(64, kPanelBytes / (4 * std::max<int64_t>(in_features, 1)) / 64 * 64);
  return std::min(rows, out_features);
}

// One panel: y[m, n] (row stride ldy) = x[m, k] · w[n, k]ᵀ (row stride ldw) + bias[n].
using PanelFn = void (*)(const float* x, int64_t m, int64_t k, const float* w, int64_t ldw, int64_t n,
                         const float* bias, float* y, int64_t ldy);

// ---- OpenBLAS ----------------------------------------------------------------------
void openblas_set_threads(int n_threads) {
  static std::atomic<int> current{0};
  if (current.exchange(n_threads) != n_threads) openblas_set_num_threads(n_threads);
}

void openblas_panel(const float* x, int64_t m, int64_t k, const float* w, int64_t ldw, int64_t n, const float* bias,
                    float* y, int64_t ldy) {
  float beta = 0.0f;
  if (bias) {  // y starts as the bias rows, and sgemm adds to it
    for (int64_t i = 0; i < m; ++i) std::memcpy(y + i * ldy, bias, size_t(n) * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(m), blasint(n), blasint(k), 1.0f, x, blasint(k), w,
              blasint(ldw), beta, y, blasint(ldy));
}

// ---- oneDNN ------------------------------------------------------------------------
// Debian's oneDNN runs on OpenMP threads. libgomp is loaded as a dependency of libdnnl
// but not linked to us directly, so its omp_set_num_threads is looked up at run time.
void onednn_set_threads(int n_threads) {
  using SetThreads = void (*)(int);
  static const auto set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local int current = 0;
  if (set_threads && current != n_threads) {
    set_threads(n_threads);
    current = n_threads;
  }
}

struct OneDnnContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

void onednn_panel(const float* x, int64_t m, int64_t k, const float* w, int64_t ldw, int64_t n, const float* bias,
                  float* y, int64_t ldy) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  thread_local OneDnnContext ctx;
  // oneDNN 2.6 takes its fast brgemm kernels only for a dense destination (with a row
  // stride it falls back to gemm:jit, ~40% slower): a panel narrower than y is
  // computed into a dense scratch and copied into y's columns.
  thread_local std::vector<float> dense_y;
  float* dst = y;
  if (ldy != n) {
    dense_y.resize(size_t(m * n));
    dst = dense_y.data();
  }
  const dnnl::memory::desc src_md({m, k}, dt::f32, dims{k, 1});    // [m, k] row-major
  const dnnl::memory::desc wei_md({k, n}, dt::f32, dims{1, ldw});  // Wᵀ: W's rows are its columns
  const dnnl::memory::desc dst_md({m, n}, dt::f32, dims{n, 1});    // [m, n] dense
  const dnnl::memory::desc bias_md = bias ? dnnl::memory::desc({1, n}, dt::f32, dims{n, 1}) : dnnl::memory::desc();
  // oneDNN's primitive cache makes repeated shapes cheap (the JIT code is reused).
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md), ctx.engine);
  const dnnl::matmul matmul(pd);
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, dnnl::memory(src_md, ctx.engine, const_cast<float*>(x))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(wei_md, ctx.engine, const_cast<float*>(w))},
      {DNNL_ARG_DST, dnnl::memory(dst_md, ctx.engine, dst)},
  };
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, ctx.engine, const_cast<float*>(bias)));
  matmul.execute(ctx.stream, args);
  ctx.stream.wait();
  if (dst != y)  // y[:, panel] = dense_y[m, n]
    for (int64_t i = 0; i < m; ++i) std::memcpy(y + i * ldy, dst + i * n, size_t(n) * sizeof(float));
}

PanelFn panel_fn(GemmLibrary library) { return library == GemmLibrary::OneDnn ? onednn_panel : openblas_panel; }

// The pool splits the output columns; each thread runs the library single-threaded on
// its panels of weight rows, widening bf16/f16 rows into its own scratch first (still in
// its cache when multiplied). Measured ~2x faster than converting on the pool and
// multiplying on the library's threads, which then hand the cores back and forth
// (docs/cpu-kernels.md). f32 weights take the same path without the widening: a
// whole-matrix call on oneDNN's OpenMP threads stalled small GEMMs for 8-12 ms while
// its spinning threads and the pool's fought over the two cores (docs/mla.md).
void gemm_split(const LinearProblem& p, ThreadPool& pool, GemmLibrary library) {
  const PanelFn panel = panel_fn(library);
  if (library == GemmLibrary::OpenBlas) openblas_set_threads(1);  // process-wide in OpenBLAS
  const int64_t m = p.n_tokens, k = p.in_features, out = p.out_features;
  const int64_t elem_bytes = int64_t(dtype_size_bytes(p.weight_dtype));
  const int64_t rows = panel_rows(k, out);
  constexpr int64_t kColumnBlock = 64;  // unit of the column split
  const int64_t n_blocks = (out + kColumnBlock - 1) / kColumnBlock;
  pool.parallel_for(0, n_blocks, [&](int64_t b0, int64_t b1) {
    if (library == GemmLibrary::OneDnn) onednn_set_threads(1);  // per thread in OpenMP
    thread_local std::vector<float> scratch;
    if (p.weight_dtype != DType::F32) scratch.resize(size_t(std::min(rows, (b1 - b0) * kColumnBlock) * k));
    const int64_t c1 = std::min(out, b1 * kColumnBlock);
    for (int64_t r0 = b0 * kColumnBlock; r0 < c1; r0 += rows) {
      const int64_t n_rows = std::min(rows, c1 - r0);
      const char* src = static_cast<const char*>(p.weight) + r0 * p.weight_row_stride * elem_bytes;
      const float* w = reinterpret_cast<const float*>(src);
      int64_t ldw = p.weight_row_stride;
      if (p.weight_dtype != DType::F32) {  // scratch[n_rows, k] = f32(W[r0 : r0 + n_rows, :])
        convert_rows_to_f32(src, p.weight_dtype, p.weight_row_stride, n_rows, k, scratch.data());
        w = scratch.data();
        ldw = k;
      }
      // y[:, r0 : r0 + n_rows] = x · Wᵀ + bias[r0 : r0 + n_rows]
      panel(p.x, m, k, w, ldw, n_rows, p.bias ? p.bias + r0 : nullptr, p.y + r0, out);
    }
  });
}

}  // namespace

void gemm(const LinearProblem& p, ThreadPool& pool, GemmLibrary library) { gemm_split(p, pool, library); }

}  // namespace latentserve::cpu
