#pragma once
// Internal to linear(): the prefill-path GEMM through oneDNN or OpenBLAS. Weights that
// are not f32 are widened one panel of rows at a time into a thread-local scratch, so
// no f32 copy of a whole weight matrix (let alone the model) ever exists.
#include "backend/cpu/linear.h"
#include "backend/cpu/linear_gemv.h"

namespace latentserve::cpu {

void gemm(const LinearProblem& p, ThreadPool& pool, GemmLibrary library);

}  // namespace latentserve::cpu
