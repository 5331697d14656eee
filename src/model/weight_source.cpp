#include "model/weight_source.h"

#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "core/convert.h"
#include "core/error.h"

namespace latentserve {

std::vector<float> WeightSource::get_f32(const std::string& name, int64_t n) {
  TensorView t = get(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(t.data, t.dtype, out.data(), n);
  return out;
}

TensorView CheckpointWeights::get(const std::string& name, std::initializer_list<int64_t> shape) {
  TensorView t = checkpoint_.tensor(name);
  TensorView expected = TensorView::contiguous(nullptr, t.dtype, shape);
  bool same = t.rank == expected.rank;
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[size_t(i)] == expected.shape[size_t(i)];
  if (!same)
    fail("tensor '{}' in {}: expected shape {}, found {}", name, checkpoint_.file_of(name).string(),
         expected.shape_string(), t.shape_string());
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    fail("tensor '{}' in {}: expected F32, BF16 or F16 elements, found {}", name, checkpoint_.file_of(name).string(),
         dtype_name(t.dtype));
  return t;
}

namespace {
// splitmix64: a fast, well-mixed stream, good enough for benchmark weights.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

TensorView SyntheticWeights::get(const std::string& name, std::initializer_list<int64_t> shape) {
  if (dtype_ != DType::F32 && dtype_ != DType::BF16)
    fail("synthetic weights are made in F32 or BF16, not {}", dtype_name(dtype_));
  TensorView view = TensorView::contiguous(nullptr, dtype_, shape);
  const int64_t n = view.numel();
  auto& buffer = storage_.emplace_back(size_t(n) * dtype_size_bytes(dtype_));
  view.data = buffer.data();
  bytes_ += int64_t(buffer.size());

  const bool is_norm = is_norm_weight(name);
  const double half_width = is_norm ? 0.1 : 1.0 / std::sqrt(double(view.dim(-1)));
  uint64_t state = seed_ ^ std::hash<std::string>{}(name);
  for (int64_t i = 0; i < n; ++i) {
    const double u = double(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    const float value = float((is_norm ? 1.0 : 0.0) + (2.0 * u - 1.0) * half_width);
    if (dtype_ == DType::F32)
      view.ptr<float>()[i] = value;
    else
      view.ptr<uint16_t>()[i] = bf16::from_f32(value).bits;
  }
  return view;
}

}  // namespace latentserve
