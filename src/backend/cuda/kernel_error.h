#pragma once
// Error reporting for the launchers in .cu files. nvcc (13.0) cannot compile fmt 9's headers
// in C++20 mode, so a .cu file must not include core/error.h or cuda_check.h; it reports
// through these instead. They throw the same latentserve::Error (kernel_error.cpp, compiled
// by the host compiler, calls fail()), with the same message shapes as cuda_check.h.
#include <cuda_runtime.h>

#include <sstream>
#include <string>

namespace latentserve::cuda {

[[noreturn]] void throw_error(const std::string& message);
// cudaGetLastError() after a launch; throws naming the kernel and where it was launched.
void check_kernel_launch(const char* kernel, const char* file, int line);
// Any CUDA runtime call's status.
void check_cuda_status(cudaError_t status, const char* what, const char* file, int line);

// kernel_fail("rms_norm: dim must be > 0, found ", dim) throws Error with the pieces joined.
template <typename... Parts>
[[noreturn]] void kernel_fail(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  throw_error(out.str());
}

}  // namespace latentserve::cuda

// In .cu files, the same macro names as cuda_check.h (which host-compiled files use).
#if defined(__CUDACC__) && !defined(LS_CUDA_CHECK_LAUNCH)
#define LS_CUDA_CHECK_LAUNCH(kernel) ::latentserve::cuda::check_kernel_launch(kernel, __FILE__, __LINE__)
#define LS_CUDA_CHECK(call) ::latentserve::cuda::check_cuda_status((call), #call, __FILE__, __LINE__)
#endif
