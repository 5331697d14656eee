#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>
#include <tuple>

#include "backend/cuda/activation.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "core/error.h"

namespace latentserve::cuda {
namespace {

void check_lt(cublasStatus_t status, const char* what, int64_t m, int64_t n, int64_t k) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt {} failed for y[{}, {}] = x[{}, {}] w[{}, {}]^T: {} ({})", what, m, n, m, k, n, k,
         cublasLtGetStatusName(status), cublasLtGetStatusString(status));
}

// Pointer alignment class (bytes, 2..16): cuBLASLt's heuristic picks kernels by it, so a plan
// made for 16-byte-aligned pointers is never run on an 8-byte-aligned one.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : 2;
}

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's top ones, for autotuning
  bool bias_epilogue = false;  // bias through CUBLASLT_EPILOGUE_BIAS
  bool bias_after = false;     // f32 y whose bf16-bias epilogue cuBLASLt refused: add_bias_f32 after the matmul
  bool use_gemv = false;       // the skinny kernel (gemv.h) beat cuBLASLt's candidates on this shape
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (auto l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

// Key: (m, n, k, y_f32, has_bias, alignments of x, w, y, bias).
using PlanKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, uint32_t, uint32_t, uint32_t, uint32_t>;

}  // namespace

struct Gemm::State {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace{kWorkspaceBytes};  // once, here: a captured matmul must not allocate
  DeviceBuffer flush;                       // autotune: 2 x L2 bytes written before each timed run
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  ~State() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
  }

  // Autotune: the fastest of cuBLASLt's candidates and (when `gemv` is set) the gemv kernel on
  // these operands: one warm-up, best of 3, event-timed, with the L2 cache flushed before each
  // run, as a decode step meets its weights (15 GB of them stream through a 50 MB L2; a
  // warm-L2 timing picks kernels that are slower from memory). Outside graph capture only; y
  // is overwritten, as the call will anyway. Sets plan.algo and plan.use_gemv.
  void autotune(Plan& plan, const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32,
                const void* bias, const std::optional<GemvConfig>& gemv, cudaStream_t s) {
    if (flush.bytes() == 0) {
      int device = 0, l2 = 0;
      LS_CUDA_CHECK(cudaGetDevice(&device));
      LS_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
      flush = DeviceBuffer(std::max<size_t>(size_t(2) * size_t(l2), size_t(8) << 20));
    }
    cudaEvent_t start, stop;
    LS_CUDA_CHECK(cudaEventCreate(&start));
    LS_CUDA_CHECK(cudaEventCreate(&stop));
    const auto cold_ms = [&](const auto& run) {  // best of 3 after a warm-up; +inf when run() refuses
      float ms = 1e30f;
      for (int rep = 0; rep < 4; ++rep) {
        LS_CUDA_CHECK(cudaMemsetAsync(flush.data(), rep, flush.bytes(), s));
        LS_CUDA_CHECK(cudaEventRecord(start, s));
        const bool ok = run();
        LS_CUDA_CHECK(cudaEventRecord(stop, s));
        LS_CUDA_CHECK(cudaEventSynchronize(stop));
        if (!ok) return 1e30f;
        float t = 0;
        LS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (rep > 0) ms = std::min(ms, t);
      }
      return ms;
    };
    const float alpha = 1.0f, beta = 0.0f;
    float best_ms = 1e30f;
    for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
      const float ms = cold_ms([&] {
        return cublasLtMatmul(handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c, &algo,
                              workspace.data(), kWorkspaceBytes, s) == CUBLAS_STATUS_SUCCESS;
      });
      if (ms < best_ms) best_ms = ms, plan.algo = algo;
    }
    if (gemv) {
      const float ms = cold_ms([&] {
        gemv_bf16(x, w, y, m, n, k, y_f32, bias, s, *gemv);
        return true;
      });
      plan.use_gemv = ms < best_ms;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }

  // The descriptors for one shape and the heuristic's best algorithm; false when the heuristic
  // finds none (only asked for the bf16-bias-into-f32 epilogue, which has a fallback).
  bool build(Plan& plan, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias, bool bias_epilogue,
             const uint32_t align[4], int n_candidates) {
    check_lt(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor", m, n, k);
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
             "TRANSA", m, n, k);
    check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)), "TRANSB", m,
             n, k);
    if (bias_epilogue) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "bias epilogue", m, n, k);
      const int32_t bias_type = CUDA_R_16BF;  // the default follows y's type; our bias is bf16 either way
      check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                              sizeof(bias_type)),
               "bias data type", m, n, k);
      // The heuristic sees a pointer of the right alignment class; each call sets the real one.
      check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
               "bias pointer", m, n, k);
    }
    // Column-major: A = w as [k, n] (ld k, op T), B = x as [k, m] (ld k), D = y^T as [n, m] (ld n).
    const cudaDataType_t out_type = y_f32 ? CUDA_R_32F : CUDA_R_16BF;
    check_lt(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k), "layout of w", m, n, k);
    check_lt(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k), "layout of x", m, n, k);
    check_lt(cublasLtMatrixLayoutCreate(&plan.c, out_type, uint64_t(n), uint64_t(m), n), "layout of y", m, n, k);
    cublasLtMatmulPreference_t preference = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&preference), "preference", m, n, k);
    const uint64_t workspace_bytes = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                         sizeof(workspace_bytes));
    // align: x, w, y (A is w, B is x, C = D is y)
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align[1], 4);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align[0], 4);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align[2], 4);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align[2], 4);
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(n_candidates));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.c,
                                                                 preference, n_candidates, results.data(), &found);
    cublasLtMatmulPreferenceDestroy(preference);
    const bool may_fall_back = bias_epilogue && y_f32;
    if (may_fall_back && (status != CUBLAS_STATUS_SUCCESS || found == 0)) return false;
    check_lt(status, "heuristic", m, n, k);
    if (found == 0)
      fail("cuBLASLt has no algorithm for y[{}, {}] = x[{}, {}] w[{}, {}]^T (bf16 x and w, {} y{})", m, n, m, k, n, k,
           y_f32 ? "f32" : "bf16", bias_epilogue ? ", bf16 bias" : "");
    plan.algo = results[0].algo;
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
    plan.bias_epilogue = bias_epilogue;
    return true;
  }
};

Gemm::Gemm() : state_(std::make_unique<State>()) {
  check_lt(cublasLtCreate(&state_->handle), "handle creation", 0, 0, 0);
}

Gemm::~Gemm() = default;

void Gemm::set_candidates(int n) {
  if (n < 1 || n > kMaxGemmCandidates)
    fail("Gemm::set_candidates: need 1..{} heuristic candidates per shape, found {}", kMaxGemmCandidates, n);
  candidates_ = n;
}

size_t Gemm::n_cached_plans() const { return state_->plans.size(); }

void Gemm::bf16(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias,
                cudaStream_t s) {
  if (m < 0 || n <= 0 || k <= 0) fail("Gemm::bf16: need m >= 0, n > 0, k > 0, found m {}, n {}, k {}", m, n, k);
  if (!x || !w || !y)
    fail("Gemm::bf16: x, w and y must be device pointers, {} is null (m {}, n {}, k {})",
         !x ? "x" : !w ? "w" : "y", m, n, k);
  if (m == 0) return;
  const bool gemv_fits = m <= gemv_max_rows_ && gemv_supported(x, w, y, m, k);
  const uint32_t align[4] = {alignment(x), alignment(w), alignment(y), bias ? alignment(bias) : 0u};
  const PlanKey key{m, n, k, y_f32, bias != nullptr, align[0], align[1], align[2], align[3]};
  auto it = state_->plans.find(key);
  if (it == state_->plans.end()) {
    auto plan = std::make_unique<Plan>();
    if (!state_->build(*plan, m, n, k, y_f32, bias, bias != nullptr, align, candidates_)) {
      plan = std::make_unique<Plan>();  // f32 y: matmul without the epilogue, then the bias kernel
      state_->build(*plan, m, n, k, y_f32, nullptr, false, align, candidates_);
      plan->bias_after = true;
    }
    it = state_->plans.emplace(key, std::move(plan)).first;
    Plan& fresh = *it->second;
    if (fresh.bias_epilogue)
      check_lt(cublasLtMatmulDescSetAttribute(fresh.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
               "bias pointer", m, n, k);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    LS_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
    fresh.use_gemv = gemv_fits;  // untuned: the skinny kernel wherever it applies
    if (autotune_ && capturing == cudaStreamCaptureStatusNone && (fresh.candidates.size() > 1 || gemv_fits))
      state_->autotune(fresh, x, w, y, m, n, k, y_f32, bias,
                       gemv_fits ? std::optional<GemvConfig>(gemv_config_) : std::nullopt, s);
  }
  Plan& plan = *it->second;
  if (plan.use_gemv && gemv_fits) {  // decode: the weight-streaming kernel
    gemv_bf16(x, w, y, m, n, k, y_f32, bias, s, gemv_config_);
    return;
  }
  if (plan.bias_epilogue)
    check_lt(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer", m, n, k);
  const float alpha = 1.0f, beta = 0.0f;
  check_lt(cublasLtMatmul(state_->handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c,
                          &plan.algo, state_->workspace.data(), kWorkspaceBytes, s),
           "matmul", m, n, k);
  if (plan.bias_after) add_bias_f32(static_cast<float*>(y), bias, m, n, s);
}

}  // namespace latentserve::cuda
