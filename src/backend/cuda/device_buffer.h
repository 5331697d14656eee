#pragma once
// DeviceBuffer: one cudaMalloc'd allocation, freed on destruction (move-only).
#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace latentserve::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    const cudaError_t status = cudaMalloc(&data_, bytes_);
    if (status != cudaSuccess) {
      size_t free_bytes = 0, total_bytes = 0;
      cudaGetLastError();  // clear the sticky-free allocation error
      cudaMemGetInfo(&free_bytes, &total_bytes);
      fail("cudaMalloc of {} bytes ({:.2f} GiB) failed: {}; the GPU has {:.2f} GiB free of {:.2f} GiB", bytes_,
           double(bytes_) / double(1 << 30), cudaGetErrorString(status), double(free_bytes) / double(1 << 30),
           double(total_bytes) / double(1 << 30));
    }
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (data_) cudaFree(data_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* as() const { return static_cast<T*>(data_); }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes, size_t offset = 0) {
    LS_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice));
  }
  void download(void* host, size_t bytes, size_t offset = 0) const {
    LS_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost));
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace latentserve::cuda
