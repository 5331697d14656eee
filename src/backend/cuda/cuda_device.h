#pragma once
// The GPU a model runs on: presence checks with clear errors, its properties, and
// the stream every kernel of the backend is launched on.
#include <cuda_runtime.h>

#include <string>

namespace latentserve::cuda {

// Number of usable CUDA devices; 0 when there is no GPU or no driver (never throws).
int device_count();
// "no CUDA GPU" reason when device_count() == 0, for skip messages and errors.
std::string no_device_reason();

class CudaDevice {
 public:
  // Selects `ordinal`; throws Error when no GPU is present or the ordinal is out of range.
  explicit CudaDevice(int ordinal = 0);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int ordinal() const { return ordinal_; }
  const cudaDeviceProp& properties() const { return props_; }
  std::string name() const { return props_.name; }
  int n_sm() const { return props_.multiProcessorCount; }
  cudaStream_t stream() const { return stream_; }
  void synchronize() const;
  // (free, total) bytes of device memory now.
  std::pair<size_t, size_t> memory_info() const;

 private:
  int ordinal_;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
};

}  // namespace latentserve::cuda
