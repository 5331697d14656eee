#include "model/tensor_parallel.h"

#include <exception>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/communicator.h"
#include "core/error.h"
#include "perf/kv_calculator.h"

namespace latentserve {

TpRange tp_split(int64_t n, const TpRank& tp) {
  return {n * tp.rank / tp.size, n * (tp.rank + 1) / tp.size};
}

TpRange tp_query_heads(int64_t n_head, const TpRank& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    fail("tensor-parallel rank {} of {}: expected 0 <= rank < size", tp.rank, tp.size);
  if (n_head % tp.size != 0) fail("--tensor-parallel-size {} does not divide the {} attention heads", tp.size, n_head);
  return tp_split(n_head, tp);
}

TpHeads tp_heads(int64_t n_head, int64_t n_head_kv, const TpRank& tp) {
  TpHeads h;
  h.q = tp_query_heads(n_head, tp);
  const KvHeadSplit split = split_kv_heads(n_head, n_head_kv, tp.size, "--tensor-parallel-size");
  if (split.replication == 1) {
    h.kv = tp_split(n_head_kv, tp);
  } else {  // one KV head, shared with the other ranks whose query heads also read it
    const int64_t kv = h.q.begin / (n_head / n_head_kv);
    h.kv = {kv, kv + 1};
  }
  return h;
}

void tp_all_reduce(const TpRank& tp, float* x, int64_t n) {
  if (tp.size > 1) tp.comm->all_reduce_sum(x, n);
}

void tp_lm_head(const TpRank& tp, const LinearWeight& lm_head, TpRange vocab, const float* x, int64_t n_rows,
                int64_t vocab_size, float* logits, ThreadPool& pool) {
  if (tp.size == 1) return lm_head(x, n_rows, logits, pool);  // [n_rows, vocab]
  std::vector<float> local(size_t(n_rows * vocab.size()));
  lm_head(x, n_rows, local.data(), pool);  // [n_rows, this rank's vocab slice]
  tp.comm->all_gather_columns(local.data(), n_rows, vocab.begin, vocab.size(), vocab_size, logits);
}

namespace {

AttentionSpec full_attention_spec(const ModelConfig& c) {
  if (c.mla)
    return AttentionSpec::latent(c.n_head, c.mla->kv_lora_rank, c.mla->qk_nope_head_dim, c.mla->qk_rope_head_dim,
                                 c.mla->v_head_dim);
  return AttentionSpec::standard(c.n_head, c.n_head_kv, c.head_dim, c.head_dim);
}

// Every rank asks for the whole tensor and slices it; the first request's view serves all
// of them (synthetic weights are then made once, not once per rank).
class SharedWeights final : public WeightSource {
 public:
  using Views = std::map<std::string, TensorView>;
  SharedWeights(std::shared_ptr<WeightSource> inner, std::shared_ptr<Views> views)
      : inner_(std::move(inner)), views_(std::move(views)) {}
  TensorView get(const std::string& name, std::initializer_list<int64_t> shape) override {
    auto [it, fresh] = views_->try_emplace(name);
    if (fresh) {
      try {
        it->second = inner_->get(name, shape);
      } catch (...) {
        views_->erase(it);
        throw;
      }
    }
    return it->second;
  }
  bool has(const std::string& name) const override { return inner_->has(name); }

 private:
  std::shared_ptr<WeightSource> inner_;
  std::shared_ptr<Views> views_;  // shared by the ranks' sources
};

// One KV cache per rank, behind the block ids they share.
class TpKvCache final : public KvCacheMemory {
 public:
  explicit TpKvCache(std::vector<std::unique_ptr<KvCacheMemory>> ranks) : ranks_(std::move(ranks)) {}
  std::string_view device() const override { return ranks_[0]->device(); }
  int64_t n_blocks() const override { return ranks_[0]->n_blocks(); }
  int64_t bytes() const override {
    int64_t sum = 0;
    for (const auto& r : ranks_) sum += r->bytes();
    return sum;
  }
  void copy_block(int64_t src_block, int64_t dst_block) override {
    for (auto& r : ranks_) r->copy_block(src_block, dst_block);
  }
  KvCacheMemory& rank(size_t r) { return *ranks_[r]; }

 private:
  std::vector<std::unique_ptr<KvCacheMemory>> ranks_;
};

class TensorParallelModel final : public CausalLM {
 public:
  TensorParallelModel(ModelFactory make, const ModelConfig& config, std::unique_ptr<WeightSource> weights,
                      const ModelOptions& options, ThreadPool& pool)
      : config_(config), spec_(full_attention_spec(config)), group_(options.tensor_parallel_size) {
    const int size = options.tensor_parallel_size;
    std::shared_ptr<WeightSource> shared = std::move(weights);
    auto views = std::make_shared<SharedWeights::Views>();
    const int threads_per_rank = std::max(1, pool.n_threads() / size);
    for (int r = 0; r < size; ++r) {
      pools_.push_back(std::make_unique<ThreadPool>(threads_per_rank));
      ModelOptions rank_options = options;
      rank_options.tensor_parallel_size = 1;
      rank_options.tp_rank = {r, size, &group_.rank(r)};
      auto source = std::make_unique<SharedWeights>(shared, views);
      ranks_.push_back(with_context(fmt::format("tensor-parallel rank {} of {}", r, size), [&] {
        return make(config, std::move(source), rank_options, *pools_.back());
      }));
    }
  }

  const ModelConfig& config() const override { return config_; }
  AttentionSpec attention_spec() const override { return spec_; }

  std::unique_ptr<KvCacheMemory> make_kv_cache(int64_t n_blocks, int64_t block_size_tokens,
                                               const cpu::KvCacheOptions& options) const override {
    std::vector<std::unique_ptr<KvCacheMemory>> caches;
    for (const auto& rank : ranks_) caches.push_back(rank->make_kv_cache(n_blocks, block_size_tokens, options));
    return std::make_unique<TpKvCache>(std::move(caches));
  }
  int64_t kv_block_bytes(int64_t block_size_tokens, const cpu::KvCacheOptions& options) const override {
    int64_t sum = 0;  // every rank's slice lives in this process's memory
    for (const auto& rank : ranks_) sum += rank->kv_block_bytes(block_size_tokens, options);
    return sum;
  }

  void forward(const ForwardBatch& batch, KvCacheMemory& kv_memory, float* logits) override {
    auto* kv = dynamic_cast<TpKvCache*>(&kv_memory);
    if (!kv) fail("a tensor-parallel model needs the KV cache its make_kv_cache made, found a {} cache", kv_memory.device());
    const size_t size = ranks_.size();
    // Rank 0 writes the caller's logits; the others gather into scratch of their own.
    scratch_.resize(size - 1);
    for (auto& s : scratch_) s.resize(batch.logits_indices.size() * size_t(vocab_size()));
    std::vector<std::exception_ptr> errors(size);
    const auto run_rank = [&](size_t r) {
      try {
        ranks_[r]->forward(batch, kv->rank(r), r == 0 ? logits : scratch_[r - 1].data());
      } catch (...) {
        errors[r] = std::current_exception();
        group_.abort();  // the other ranks leave their collectives with an Error
      }
    };
    std::vector<std::thread> threads;
    for (size_t r = 1; r < size; ++r) threads.emplace_back(run_rank, r);
    run_rank(0);
    for (auto& t : threads) t.join();
    group_.reset();
    // A rank's own failure is the cause; the others are the collectives it left abandoned.
    for (const auto& e : errors) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const CollectiveAborted&) {
      }
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  ModelConfig config_;
  AttentionSpec spec_;
  InProcessGroup group_;
  std::vector<std::unique_ptr<ThreadPool>> pools_;
  std::vector<std::unique_ptr<CausalLM>> ranks_;
  std::vector<std::vector<float>> scratch_;  // [rank - 1]: the logits of ranks 1..size-1
};

}  // namespace

std::string tensor_parallel_summary(const ModelConfig& config, int tp) {
  const AttentionSpec spec = full_attention_spec(config);
  const perf::TpKvLayout l = perf::tp_kv_layout(spec, config.n_layer, DType::BF16, tp);
  std::string line = fmt::format("tensor parallel {} (ranks as threads): {} query heads per rank", tp,
                                 l.query_heads_per_gpu);
  if (spec.kind == AttentionKind::MLA)
    line += fmt::format(", the whole latent on every rank (the KV cache is {}x that of tp 1)", tp);
  else
    line += fmt::format(", {} KV head{} per rank", l.kv_heads_per_gpu, l.kv_heads_per_gpu == 1 ? "" : "s");
  if (spec.kind != AttentionKind::MLA && l.kv_head_replication > 1)
    line += fmt::format(", each KV head on {} ranks (the KV cache is {}x that of tp 1)", l.kv_head_replication,
                        l.kv_head_replication);
  return line;
}

std::unique_ptr<CausalLM> make_tensor_parallel(ModelFactory make, const ModelConfig& config,
                                               std::unique_ptr<WeightSource> weights, const ModelOptions& options,
                                               ThreadPool& pool) {
  if (options.tensor_parallel_size < 1)
    fail("--tensor-parallel-size must be >= 1, found {}", options.tensor_parallel_size);
  if (options.tensor_parallel_size == 1) return make(config, std::move(weights), options, pool);
  // The split must work for every rank: say so before building any.
  const TpRank first{0, options.tensor_parallel_size};
  if (config.mla)
    tp_query_heads(config.n_head, first);
  else
    tp_heads(config.n_head, config.n_head_kv, first);
  return std::make_unique<TensorParallelModel>(make, config, std::move(weights), options, pool);
}

}  // namespace latentserve
