#pragma once
// Gemm: the dense bf16 GEMMs of the forward pass through cuBLASLt.
//
//   y[m, n] = x[m, k] · w[n, k]^T (+ bias[n])
//
// x and w bf16 row-major (w in the Hugging Face [out_features, in_features] layout), f32
// accumulation, y bf16 or f32, bias bf16 or null (cuBLASLt's BIAS epilogue). One Gemm owns a
// cuBLASLt handle and a fixed 32 MiB workspace; per (m, n, k, y dtype, bias, pointer
// alignments) it caches the matmul descriptor, the layouts and the heuristic's algorithm, so
// a repeated shape does no heuristic query and a decode step can be captured into a CUDA
// graph (run each shape once before capturing: the first call of a shape builds its plan).
// Not thread-safe, and the workspace is shared: use one Gemm per stream at a time.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cuda/gemv.h"

namespace latentserve::cuda {

inline constexpr int kDefaultGemmCandidates = 8, kMaxGemmCandidates = 64;

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  Gemm();  // on the current device
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x: [m, k] bf16; w: [n, k] bf16; y: [m, n] bf16 (y_f32 false) or f32; bias: [n] bf16 or
  // null. Device pointers, no host synchronisation. Throws Error naming the shape and the
  // cuBLASLt status when cuBLASLt refuses.
  void bf16(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, bool y_f32, const void* bias,
            cudaStream_t s);

  size_t n_cached_plans() const;

  // m <= this many rows (and aligned, k % 8 == 0): the skinny kernel of gemv.h may run instead
  // of cuBLASLt (0 = cuBLASLt always): always without autotune, where it times fastest with
  // it. Decode steps are these shapes.
  void set_gemv_max_rows(int rows) { gemv_max_rows_ = rows; }
  void set_gemv_config(GemvConfig config) { gemv_config_ = config; }
  GemvConfig gemv_config() const { return gemv_config_; }
  // Autotune: a new shape times cuBLASLt's top heuristic candidates and the gemv kernel (where
  // it applies) on the real operands, from a flushed L2 (outside graph capture), and keeps the
  // fastest, instead of cuBLASLt's first.
  void set_autotune(bool on) { autotune_ = on; }
  // How many of cuBLASLt's heuristic results a new shape keeps (and the autotune times), in
  // [1, kMaxGemmCandidates]; plans already made keep theirs.
  void set_candidates(int n);
  int candidates() const { return candidates_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  int gemv_max_rows_ = kGemvMaxRows;
  // r4u4s4: in a decode step's chain (PDL) its loads before the wait cover whole k = 4096 rows;
  // end to end 5% faster than r4u4 at batch 1 (H100, docs/cuda-backend.md, "split-k gemv").
  GemvConfig gemv_config_ = GemvConfig::Rows4Unroll4Split4;
  bool autotune_ = true;
  int candidates_ = kDefaultGemmCandidates;
};

}  // namespace latentserve::cuda
