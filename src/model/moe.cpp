#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/activation.h"
#include "backend/cpu/linear.h"
#include "core/error.h"

namespace latentserve {

namespace {

// Indices of the k largest values (ties: lower index first). Only the set matters.
std::vector<int32_t> top_k_indices(const float* values, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(size_t(k));
  return idx;
}

}  // namespace

Routing route_tokens(const MoeConfig& moe, const float* router_logits, int64_t n_tokens,
                     const std::vector<float>& bias) {
  const int64_t E = moe.n_routed_experts, k = moe.num_experts_per_tok, G = moe.n_group;
  const int64_t per_group = E / G;
  Routing r;
  r.expert_ids.resize(size_t(n_tokens * k));
  r.weights.resize(size_t(n_tokens * k));
  std::vector<float> scores(static_cast<size_t>(E)), choice(static_cast<size_t>(E)),
      group_scores(static_cast<size_t>(G));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* logits = router_logits + t * E;
    if (moe.scoring_func == MoeScoring::Softmax) {  // softmax over experts
      const float m = *std::max_element(logits, logits + E);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (scores[size_t(e)] = std::exp(logits[e] - m));
      for (auto& s : scores) s = float(s / sum);
    } else {
      for (int64_t e = 0; e < E; ++e) scores[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    }
    // The score experts are chosen by; noaux_tc adds the load-balancing bias.
    for (int64_t e = 0; e < E; ++e)
      choice[size_t(e)] = scores[size_t(e)] + (moe.topk_method == MoeTopk::NoauxTc ? bias[size_t(e)] : 0.0f);
    if (moe.topk_method != MoeTopk::Greedy) {
      for (int64_t g = 0; g < G; ++g) {
        const float* grp = &choice[size_t(g * per_group)];
        if (moe.topk_method == MoeTopk::GroupLimitedGreedy) {
          group_scores[size_t(g)] = *std::max_element(grp, grp + per_group);
        } else {  // sum of the two best in the group
          auto best = top_k_indices(grp, per_group, std::min<int64_t>(2, per_group));
          group_scores[size_t(g)] = 0;
          for (int32_t i : best) group_scores[size_t(g)] += grp[i];
        }
      }
      auto kept = top_k_indices(group_scores.data(), G, moe.topk_group);
      std::vector<bool> keep(static_cast<size_t>(G), false);
      for (int32_t g : kept) keep[size_t(g)] = true;
      // Experts of the other groups drop out. transformers 5.17 masks them with 0.0 in
      // V2's group-limited greedy and with -inf in V3's noaux_tc (where a biased choice
      // score can be negative, so the two differ).
      const float masked = moe.topk_method == MoeTopk::NoauxTc ? -INFINITY : 0.0f;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[size_t(e / per_group)]) choice[size_t(e)] = masked;
    }
    auto chosen = top_k_indices(choice.data(), E, k);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += scores[size_t(chosen[size_t(j)])];
    for (int64_t j = 0; j < k; ++j) {
      float w = scores[size_t(chosen[size_t(j)])];
      if (moe.norm_topk_prob) w /= (sum + 1e-20f);
      r.expert_ids[size_t(t * k + j)] = chosen[size_t(j)];
      r.weights[size_t(t * k + j)] = w * float(moe.routed_scaling_factor);
    }
  }
  return r;
}

namespace {
// y[n, H] = down(silu(gate(x)) * up(x)) for an expert of width I.
void swiglu_mlp(const ExpertWeights& w, const float* x, int64_t n, float* y, std::vector<float>& gate,
                std::vector<float>& up, ThreadPool& pool) {
  const int64_t I = w.gate_proj.dim(0);
  gate.resize(size_t(n * I));
  up.resize(size_t(n * I));
  cpu::linear(x, n, w.gate_proj, nullptr, gate.data(), pool);
  cpu::linear(x, n, w.up_proj, nullptr, up.data(), pool);
  cpu::silu_mul(gate.data(), up.data(), gate.data(), n * I);
  cpu::linear(gate.data(), n, w.down_proj, nullptr, y, pool);
}
}  // namespace

void moe_forward(const MoeConfig& moe, const MoeWeights& w, const float* x, int64_t T, int64_t H, float* out,
                 ThreadPool& pool) {
  const int64_t E = moe.n_routed_experts, k = moe.num_experts_per_tok;
  // router_logits[T, E] = x · routerᵀ
  std::vector<float> logits(static_cast<size_t>(T * E));
  cpu::linear(x, T, w.router, nullptr, logits.data(), pool);
  const Routing routing = route_tokens(moe, logits.data(), T, w.e_score_correction_bias);

  std::vector<float> gate, up, xs, ys;
  if (w.has_shared) {
    swiglu_mlp(w.shared, x, T, out, gate, up, pool);  // out = shared(x)
  } else {
    std::fill(out, out + T * H, 0.0f);
  }
  // Group the (token, slot) pairs by expert, then one batched MLP per expert.
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));
  for (int64_t i = 0; i < T * k; ++i) routed[size_t(routing.expert_ids[size_t(i)])].push_back(i);
  for (int64_t e = 0; e < E; ++e) {
    const auto& pairs = routed[size_t(e)];
    if (pairs.empty()) continue;
    const int64_t n = int64_t(pairs.size());
    xs.resize(size_t(n * H));
    ys.resize(size_t(n * H));
    for (int64_t j = 0; j < n; ++j) std::copy_n(x + (pairs[size_t(j)] / k) * H, H, &xs[size_t(j * H)]);
    swiglu_mlp(w.experts[size_t(e)], xs.data(), n, ys.data(), gate, up, pool);  // [n, H]
    for (int64_t j = 0; j < n; ++j) {
      const float wt = routing.weights[size_t(pairs[size_t(j)])];
      float* o = out + (pairs[size_t(j)] / k) * H;
      for (int64_t d = 0; d < H; ++d) o[d] += wt * ys[size_t(j * H + d)];
    }
  }
}

}  // namespace latentserve
