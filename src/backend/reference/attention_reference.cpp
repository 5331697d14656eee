#include "backend/reference/attention_reference.h"

#include <cmath>
#include <vector>

namespace latentserve::reference {

void causal_attention(const float* q, const float* k, const float* v, float* out, int64_t n_new, int64_t seq_len,
                      int64_t n_head, int64_t n_head_kv, int64_t dk, int64_t dv, double scale,
                      int64_t sliding_window) {
  const int64_t group = n_head / n_head_kv;
  std::vector<double> w(static_cast<size_t>(seq_len));
  for (int64_t i = 0; i < n_new; ++i) {
    const int64_t pos = seq_len - n_new + i;
    const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t hk = h / group;
      const float* qi = q + (i * n_head + h) * dk;
      double max_score = -INFINITY;
      for (int64_t j = first; j <= pos; ++j) {
        double s = 0;
        for (int64_t d = 0; d < dk; ++d) s += double(qi[d]) * double(k[(j * n_head_kv + hk) * dk + d]);
        w[size_t(j)] = s * scale;
        max_score = std::max(max_score, w[size_t(j)]);
      }
      double total = 0;
      for (int64_t j = first; j <= pos; ++j) total += (w[size_t(j)] = std::exp(w[size_t(j)] - max_score));
      for (int64_t d = 0; d < dv; ++d) {
        double o = 0;
        for (int64_t j = first; j <= pos; ++j) o += w[size_t(j)] * double(v[(j * n_head_kv + hk) * dv + d]);
        out[(i * n_head + h) * dv + d] = float(o / total);
      }
    }
  }
}

}  // namespace latentserve::reference
