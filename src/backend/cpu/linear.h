#pragma once
// Linear layer on the CPU: y = x · Wᵀ (+ bias), f32 activations, weights f32/bf16/f16
// as stored in the checkpoint, f32 accumulation.
// Few tokens (decode): a vectorised, threaded GEMV that streams each weight row once
// for all tokens. Many tokens (prefill): the BLAS GEMM (weights converted to f32 one
// panel at a time when they are not f32). docs/cpu-kernels.md has the measurements
// behind the defaults below.
#include <cstdint>
#include <string_view>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace latentserve::cpu {

// Which library runs the GEMM path. oneDNN is the default: on the measured machine its
// f32 matmul is ~1.5x faster than Debian's OpenBLAS 0.3.21, which picks its AVX2
// (Haswell) kernels on Zen 5 unless OPENBLAS_CORETYPE=SkylakeX is set.
enum class GemmLibrary { OneDnn, OpenBlas };
std::string_view gemm_library_name(GemmLibrary library);

// Token count from which linear() switches from the GEMV path to the BLAS GEMM.
int64_t linear_gemm_threshold_tokens();

struct LinearOptions {
  int64_t gemm_threshold_tokens = linear_gemm_threshold_tokens();  // n_tokens >= this -> GEMM
  GemmLibrary gemm_library = GemmLibrary::OneDnn;
  bool allow_avx512 = true;  // false: the AVX2 GEMV even on an AVX-512 CPU (tests cover both)
};

// x: [n_tokens, in_features] f32, contiguous
// weight: [out_features, in_features], F32 | BF16 | F16, rows contiguous (row stride may
//         exceed in_features, e.g. a slice of a wider tensor)
// bias: [out_features] f32 or nullptr
// y: [n_tokens, out_features] f32 (overwritten)
// Throws Error for any other weight dtype or a weight that is not a matrix with unit
// column stride.
void linear(const float* x, int64_t n_tokens, const TensorView& weight, const float* bias, float* y,
            ThreadPool& pool, const LinearOptions& options = LinearOptions{});

}  // namespace latentserve::cpu
