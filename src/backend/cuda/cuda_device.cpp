#include "backend/cuda/cuda_device.h"

#include "backend/cuda/cuda_check.h"

namespace latentserve::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string no_device_reason() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (status != cudaSuccess) return fmt::format("no CUDA GPU: cudaGetDeviceCount says {}", cudaGetErrorString(status));
  if (n == 0) return "no CUDA GPU: the driver lists no devices";
  return "";
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  const int n = device_count();
  if (n == 0) fail("--device cuda: {}", no_device_reason());
  if (ordinal < 0 || ordinal >= n) fail("CUDA device {} requested but only {} device(s) are present", ordinal, n);
  LS_CUDA_CHECK(cudaSetDevice(ordinal));
  LS_CUDA_CHECK(cudaGetDeviceProperties(&props_, ordinal));
  LS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaDevice::~CudaDevice() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaDevice::synchronize() const { LS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

std::pair<size_t, size_t> CudaDevice::memory_info() const {
  size_t free_bytes = 0, total_bytes = 0;
  LS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {free_bytes, total_bytes};
}

}  // namespace latentserve::cuda
