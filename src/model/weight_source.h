#pragma once
// WeightSource: where an architecture gets its tensors. A checkpoint folder, or
// synthetic random weights for benchmarks of published shapes without a download.
// The architecture states the shape it expects; the source checks or creates it.
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_page_buffer.h"
#include "core/tensor_view.h"
#include "io/checkpoint.h"

namespace latentserve {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `name` of the given shape, F32/BF16/F16 elements; errors name it.
  virtual TensorView get(const std::string& name, std::initializer_list<int64_t> shape) = 0;
  virtual bool has(const std::string& name) const = 0;
  // A [n] tensor converted to f32 (biases).
  std::vector<float> get_f32(const std::string& name, int64_t n);
};

class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(Checkpoint checkpoint) : checkpoint_(std::move(checkpoint)) {}
  TensorView get(const std::string& name, std::initializer_list<int64_t> shape) override;
  bool has(const std::string& name) const override { return checkpoint_.has(name); }

 private:
  Checkpoint checkpoint_;  // keeps the mmapped files alive
};

// Random weights made on request: linear weights ~ U(-a, a) with a = 1/sqrt(in_features),
// norm weights ~ 1 ± 0.1, all in `dtype`. Deterministic for a seed.
class SyntheticWeights final : public WeightSource {
 public:
  SyntheticWeights(DType dtype, uint64_t seed) : dtype_(dtype), seed_(seed) {}
  TensorView get(const std::string& name, std::initializer_list<int64_t> shape) override;
  bool has(const std::string& name) const override { return true; }
  int64_t bytes() const { return bytes_; }
  uint64_t seed() const { return seed_; }
  // The rule get() draws by: norm weights (name contains "norm") 1 ± 0.1, others 0 ± 1/sqrt(last dim).
  static bool is_norm_weight(const std::string& name) { return name.find("norm") != std::string::npos; }

 private:
  DType dtype_;
  uint64_t seed_;
  int64_t bytes_ = 0;
  std::deque<HugePageBuffer> storage_;  // huge pages: decode streams these every step
};

}  // namespace latentserve
