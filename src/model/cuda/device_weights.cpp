#include "model/cuda/device_weights.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/random_fill.h"
#include "core/bf16.h"
#include "core/convert.h"
#include "core/error.h"

namespace latentserve::cuda {

DeviceWeightLoader::DeviceWeightLoader(WeightSource& source, cudaStream_t stream)
    : source_(source), synthetic_(dynamic_cast<const SyntheticWeights*>(&source)), stream_(stream) {}

void DeviceWeightLoader::put(const std::string& name, std::initializer_list<int64_t> shape, void* device) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (synthetic_) {  // same distribution as SyntheticWeights::get, drawn on the device
    const bool norm = SyntheticWeights::is_norm_weight(name);
    const float half_width = norm ? 0.1f : float(1.0 / std::sqrt(double(*(shape.end() - 1))));
    fill_uniform_bf16(device, n, norm ? 1.0f : 0.0f, half_width,
                      synthetic_->seed() ^ std::hash<std::string>{}(name), stream_);
    return;
  }
  const TensorView view = source_.get(name, shape);
  if (!view.is_contiguous()) fail("{}: expected a contiguous tensor", name);
  LS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the staging buffer is reused
  staging_.resize(size_t(n));
  if (view.dtype == DType::BF16) {
    std::memcpy(staging_.data(), view.data, size_t(n) * 2);
  } else {
    std::vector<float> as_f32(static_cast<size_t>(n));
    convert_to_f32(view.data, view.dtype, as_f32.data(), n);
    for (int64_t i = 0; i < n; ++i) staging_[size_t(i)] = bf16::from_f32(as_f32[size_t(i)]).bits;
  }
  LS_CUDA_CHECK(cudaMemcpy(device, staging_.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
}

DeviceBuffer DeviceWeightLoader::matrix(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                                        int64_t cols) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  DeviceBuffer out(size_t(total * cols) * 2);
  int64_t row0 = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    put(names[i], {rows[i], cols}, out.as<char>() + size_t(row0 * cols) * 2);
    row0 += rows[i];
  }
  return out;
}

DeviceBuffer DeviceWeightLoader::vector(const std::string& name, int64_t n) {
  DeviceBuffer out(size_t(n) * 2);
  put(name, {n}, out.data());
  return out;
}

DeviceBuffer DeviceWeightLoader::stacked_vectors(const std::vector<std::string>& names, const std::vector<int64_t>& n) {
  int64_t total = 0;
  for (int64_t k : n) total += k;
  DeviceBuffer out(size_t(total) * 2);
  int64_t at = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    put(names[i], {n[i]}, out.as<char>() + size_t(at) * 2);
    at += n[i];
  }
  return out;
}

}  // namespace latentserve::cuda
