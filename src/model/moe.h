#pragma once
// Mixture of experts as DeepSeek-V2/V3 run it: a router picks num_experts_per_tok of
// n_routed_experts per token (MoeConfig says how), each expert is a SwiGLU MLP, and a
// shared MLP sees every token. Experts run as one GEMM over the tokens routed to them.
#include <cstdint>
#include <vector>

#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "model/model_config.h"

namespace latentserve {

struct ExpertWeights {
  TensorView gate_proj, up_proj;  // [moe_intermediate, hidden]
  TensorView down_proj;           // [hidden, moe_intermediate]
};

struct MoeWeights {
  TensorView router;                             // [n_routed_experts, hidden]
  std::vector<float> e_score_correction_bias;    // [n_routed_experts] (noaux_tc) or empty
  std::vector<ExpertWeights> experts;            // [n_routed_experts]
  bool has_shared = false;
  ExpertWeights shared;                          // [moe_intermediate * n_shared_experts, hidden]
};

struct Routing {
  std::vector<int32_t> expert_ids;  // [n_tokens, k]
  std::vector<float> weights;       // [n_tokens, k], scaling already applied
};

// router_logits: [n_tokens, n_routed_experts] (computed in f32, as transformers does).
Routing route_tokens(const MoeConfig& moe, const float* router_logits, int64_t n_tokens,
                     const std::vector<float>& e_score_correction_bias);

// out[T, H] = Σ_k w_k expert_k(x) + shared(x)
void moe_forward(const MoeConfig& moe, const MoeWeights& w, const float* x, int64_t n_tokens, int64_t hidden,
                 float* out, ThreadPool& pool);

}  // namespace latentserve
