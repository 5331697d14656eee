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
  // Tensor parallel. Column-parallel: output rows [begin, end) of [out, in] (and their bias).
  void load_rows(WeightSource& w, const std::string& prefix, int64_t out, int64_t in, bool with_bias, int64_t begin,
                 int64_t end) {
    load(w, prefix, out, in, with_bias);
    weight = weight.slice(0, begin, end);
    if (with_bias) bias = std::vector<float>(bias.begin() + begin, bias.begin() + end);
  }
  // Row-parallel: input columns [begin, end) of [out, in] (a strided view); the bias, which
  // must be added once after the partial sums are reduced, only where add_bias is true.
  void load_columns(WeightSource& w, const std::string& prefix, int64_t out, int64_t in, bool with_bias,
                    int64_t begin, int64_t end, bool add_bias) {
    load(w, prefix, out, in, with_bias);
    weight = weight.slice(1, begin, end);
    if (!add_bias) bias.clear();
  }
  int64_t out_features() const { return weight.dim(0); }
  // y[n, out] = x[n, in] · Wᵀ + b
  void operator()(const float* x, int64_t n, float* y, ThreadPool& pool) const {
    cpu::linear(x, n, weight, bias.empty() ? nullptr : bias.data(), y, pool);
  }
};

}  // namespace latentserve
