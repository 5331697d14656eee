#pragma once
// Tensor parallelism (Megatron style) over ranks that each hold a slice of every layer:
//   column-parallel (output rows split): q/k/v, gate/up, MLA's q_b / kv_b, the experts'
//     gate/up, and the LM head (vocab-parallel, its logits all-gathered);
//   row-parallel (input columns split, partial sums all-reduced): o_proj, down_proj, the
//     experts' down; a row-parallel bias is added by rank 0 only;
//   replicated: embeddings, norms, MLA's q_a / kv_a projections (every rank computes and
//     caches the whole latent), the MoE router.
// Query heads split evenly; KV heads split evenly too, or, when size > n_head_kv, each
// rank holds the one KV head its query heads read (replicated on size / n_head_kv ranks).
//
// On the CPU the ranks run as threads of one process (InProcessGroup); the point is the
// same sharded code path the GPU would run, exercised in CI. docs/tensor-parallel.md.
#include <cstdint>
#include <memory>
#include <string>

#include "model/architectures.h"
#include "model/linear_weight.h"
#include "model/model_options.h"

namespace latentserve {

// A half-open index range.
struct TpRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Rank tp.rank's share of n items: [n * rank / size, n * (rank + 1) / size).
TpRange tp_split(int64_t n, const TpRank& tp);

// The query heads a rank holds; Error naming --tensor-parallel-size unless size divides n_head.
TpRange tp_query_heads(int64_t n_head, const TpRank& tp);

// The query and KV heads a rank of a standard-attention model holds. Errors name
// --tensor-parallel-size: size must divide n_head, and n_head_kv must divide size or be
// divisible by it.
struct TpHeads {
  TpRange q, kv;
};
TpHeads tp_heads(int64_t n_head, int64_t n_head_kv, const TpRank& tp);

// What a rank's forward calls; both are plain calls at size 1 (no collectives).
// x[n] <- the sum of every rank's x[n] (after a row-parallel layer).
void tp_all_reduce(const TpRank& tp, float* x, int64_t n);
// logits[n_rows, vocab_size] = x[n_rows, in] · lm_headᵀ, where this rank's lm_head holds the
// vocab rows `vocab` (tp_split of vocab_size); the ranks' column blocks are all-gathered.
void tp_lm_head(const TpRank& tp, const LinearWeight& lm_head, TpRange vocab, const float* x, int64_t n_rows,
                int64_t vocab_size, float* logits, ThreadPool& pool);

// One line for the startup log: heads per rank, KV replication, what it costs the cache.
std::string tensor_parallel_summary(const ModelConfig& config, int tp);

// options.tensor_parallel_size ranks of the architecture `make`, as one CausalLM: forward
// runs every rank on its own thread (and its own ThreadPool of pool.n_threads() / size
// threads, at least one) and returns rank 0's logits; the KV cache it makes holds every
// rank's slice (each rank's heads, or the whole latent for MLA).
std::unique_ptr<CausalLM> make_tensor_parallel(ModelFactory make, const ModelConfig& config,
                                               std::unique_ptr<WeightSource> weights, const ModelOptions& options,
                                               ThreadPool& pool);

}  // namespace latentserve
