#pragma once
// A linear layer's weights as an architecture holds them: the checkpoint's matrix
// (any float dtype, mmapped) and an optional f32 bias.
#include <string>
#include <vector>

#include "backend/cpu/linear.h"
#include "model/weight_source.h"

namespace latentserve {

struct LinearWeight {
  TensorView weight;        // [out, in]
  std::vector<float> bias;  // [out] or empty

  void load(WeightSource& w, const std::string& prefix, int64_t out, int64_t in, bool with_bias) {
    weight = w.get(prefix + ".weight", {out, in});
    if (with_bias) bias = w.get_f32(prefix + ".bias", out);
  }
  int64_t out_features() const { return weight.dim(0); }
  // y[n, out] = x[n, in] · Wᵀ + b
  void operator()(const float* x, int64_t n, float* y, ThreadPool& pool) const {
    cpu::linear(x, n, weight, bias.empty() ? nullptr : bias.data(), y, pool);
  }
};

}  // namespace latentserve
