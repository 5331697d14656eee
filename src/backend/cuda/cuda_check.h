#pragma once
// Error checking for every CUDA runtime call and kernel launch. A failure throws
// latentserve::Error naming the call (or kernel), the CUDA error and where it happened.
#include <cuda_runtime.h>

#include "core/error.h"

namespace latentserve::cuda {

inline void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA call {} failed at {}:{}: {} ({})", what, file, line, cudaGetErrorName(status),
         cudaGetErrorString(status));
}

// After a kernel launch: the launch configuration errors (cudaGetLastError).
inline void check_launch(const char* kernel, const char* file, int line) {
  check(cudaGetLastError(), kernel, file, line);
}

}  // namespace latentserve::cuda

#define LS_CUDA_CHECK(call) ::latentserve::cuda::check((call), #call, __FILE__, __LINE__)
#define LS_CUDA_CHECK_LAUNCH(kernel) ::latentserve::cuda::check_launch(kernel, __FILE__, __LINE__)
