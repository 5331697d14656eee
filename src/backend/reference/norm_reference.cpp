#include "backend/reference/norm_reference.h"

#include <cmath>
#include <vector>

#include "backend/reference/linear_reference.h"

namespace latentserve::reference {
namespace {

void normalize_row(const double* x, int64_t dim, const TensorView& weight, double eps, double* out) {
  double sum_squares = 0.0;
  for (int64_t i = 0; i < dim; ++i) sum_squares += x[i] * x[i];
  const double inv_rms = 1.0 / std::sqrt(sum_squares / double(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = weight_element(weight, i) * x[i] * inv_rms;
}

}  // namespace

void rms_norm_reference(const float* x, int64_t n_rows, int64_t dim, const TensorView& weight, double eps,
                        double* out) {
  std::vector<double> row(static_cast<size_t>(dim));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) row[size_t(i)] = double(x[r * dim + i]);
    normalize_row(row.data(), dim, weight, eps, out + r * dim);
  }
}

void add_rms_norm_reference(const float* residual, const float* x, int64_t n_rows, int64_t dim,
                            const TensorView& weight, double eps, double* residual_out, double* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double* res = residual_out + r * dim;
    for (int64_t i = 0; i < dim; ++i) res[i] = double(residual[r * dim + i]) + double(x[r * dim + i]);
    normalize_row(res, dim, weight, eps, out + r * dim);
  }
}

}  // namespace latentserve::reference
