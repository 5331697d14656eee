#pragma once
// Weights in device memory, bf16: uploaded from a WeightSource (any float dtype, converted on
// the host), or, for SyntheticWeights, generated on the device (no host copy of an 8B model).
// Several checkpoint tensors can be fused into one device matrix (q|k|v, gate|up): their rows
// are stacked in the order given.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "model/weight_source.h"

namespace latentserve::cuda {

class DeviceWeightLoader {
 public:
  DeviceWeightLoader(WeightSource& source, cudaStream_t stream);

  // The tensors `names` (each [rows_i, cols]) stacked into one bf16 [sum rows_i, cols] matrix.
  DeviceBuffer matrix(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t cols);
  // A [n] vector (norm weight or bias) in bf16.
  DeviceBuffer vector(const std::string& name, int64_t n);
  // Biases of several tensors stacked: [sum n_i].
  DeviceBuffer stacked_vectors(const std::vector<std::string>& names, const std::vector<int64_t>& n);

 private:
  // Writes tensor `name` of `shape` as bf16 at `device`.
  void put(const std::string& name, std::initializer_list<int64_t> shape, void* device);

  WeightSource& source_;
  const SyntheticWeights* synthetic_;  // non-null: fill on the device instead of reading the source
  cudaStream_t stream_;
  uint64_t n_filled_ = 0;  // distinct seed per synthetic tensor
  std::vector<uint16_t> staging_;
};

}  // namespace latentserve::cuda
