#include "backend/cuda/kernel_error.h"

#include "backend/cuda/cuda_check.h"

namespace latentserve::cuda {

void throw_error(const std::string& message) { throw Error(message); }

void check_kernel_launch(const char* kernel, const char* file, int line) { check_launch(kernel, file, line); }

void check_cuda_status(cudaError_t status, const char* what, const char* file, int line) {
  check(status, what, file, line);
}

}  // namespace latentserve::cuda
