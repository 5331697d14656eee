#include "engine/offline_runner.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/batch_builder.h"
#include "kv/block_pool.h"

namespace latentserve {

OfflineRunner::OfflineRunner(CausalLM& model, RunnerOptions options, ThreadPool& pool)
    : model_(model), options_(options), pool_(pool) {
  if (options_.block_size_tokens == 0)
    options_.block_size_tokens = model.attention_spec().kind == AttentionKind::MLA ? 64 : 16;
  if (!is_supported_block_size(options_.block_size_tokens))
    fail("--block-size must be 16, 32, 64 or 128, got {}", options_.block_size_tokens);
  if (options.max_batched_tokens <= 0) fail("max_batched_tokens must be positive, got {}", options.max_batched_tokens);
}

std::vector<SequenceResult> OfflineRunner::run(const std::vector<SequenceRequest>& requests, bool keep_prompt_logits) {
  const int64_t bs = options_.block_size_tokens, vocab = model_.vocab_size();
  const auto& eos = model_.config().eos_token_ids;
  std::vector<Sequence> seqs;
  int64_t n_blocks = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.prompt.empty()) fail("request {}: the prompt is empty", i);
    if (r.max_new_tokens < 0) fail("request {}: max_new_tokens must be >= 0, got {}", i, r.max_new_tokens);
    for (int32_t id : r.prompt)
      if (id < 0 || id >= vocab) fail("request {}: token id {} is outside the vocabulary [0, {})", i, id, vocab);
    seqs.emplace_back(int64_t(i), r.prompt, bs);
    n_blocks += (int64_t(r.prompt.size()) + r.max_new_tokens + bs - 1) / bs;
  }
  // Enough blocks for every sequence at full length: this runner never preempts.
  BlockPool block_pool(std::max<int64_t>(n_blocks, 1), bs);
  std::unique_ptr<KvCacheMemory> kv_memory = model_.make_kv_cache(block_pool.n_blocks(), bs, options_.kv_options);
  KvCacheMemory& kv = *kv_memory;
  stats_ = {};
  stats_.n_kv_blocks = block_pool.n_blocks();
  stats_.kv_cache_bytes = kv.bytes();

  std::vector<SequenceResult> results(requests.size());
  std::vector<bool> finished(requests.size(), false);
  for (size_t i = 0; i < requests.size(); ++i) {
    finished[i] = requests[i].max_new_tokens == 0 && !keep_prompt_logits;
    if (keep_prompt_logits) results[i].prompt_logits.resize(requests[i].prompt.size() * size_t(vocab));
  }
  std::vector<float> logits;
  std::vector<int64_t> owner;
  while (true) {
    // Decodes first (one token each), then prefill chunks while the budget lasts.
    std::vector<ScheduledChunk> chunks;
    int64_t budget = options_.max_batched_tokens;
    bool any_prefill = false;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& s : seqs) {
        if (finished[size_t(s.id)] || s.n_uncomputed_tokens() == 0 || budget == 0) continue;
        const bool is_decode = s.n_generated_tokens() > 0;
        if (is_decode != (pass == 0)) continue;
        const int64_t n = std::min(s.n_uncomputed_tokens(), budget);
        if (!s.block_table.reserve(s.n_computed_tokens + n, block_pool))
          fail("KV cache exhausted ({} blocks) — cannot happen with a pool sized for every sequence", n_blocks);
        chunks.push_back({&s, n, keep_prompt_logits && !is_decode});
        budget -= n;
        any_prefill |= !is_decode;
      }
    }
    if (chunks.empty()) break;

    ForwardBatch batch = build_forward_batch(chunks, bs, &owner);
    logits.resize(batch.logits_indices.size() * size_t(vocab));
    const auto t0 = std::chrono::steady_clock::now();
    model_.forward(batch, kv, logits.data());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.n_steps;
    (any_prefill ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
    (any_prefill ? stats_.prefill_tokens : stats_.decode_tokens) += batch.n_tokens();

    // Walk the logits rows in order; each chunk's rows are contiguous and ascending.
    size_t row = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      Sequence& s = *chunks[c].sequence;
      SequenceResult& res = results[size_t(s.id)];
      const int64_t first = s.n_computed_tokens;
      s.n_computed_tokens += chunks[c].n_tokens;
      for (int64_t k = 0; row < owner.size() && owner[row] == int64_t(c); ++row, ++k) {
        const float* r = &logits[row * size_t(vocab)];
        if (chunks[c].all_logits && first + k < s.n_prompt_tokens)
          std::copy(r, r + vocab, res.prompt_logits.begin() + (first + k) * vocab);
      }
      if (s.n_uncomputed_tokens() > 0) continue;  // prompt not finished yet
      const SequenceRequest& req = requests[size_t(s.id)];
      if (s.n_generated_tokens() >= req.max_new_tokens) {
        finished[size_t(s.id)] = true;
        continue;
      }
      // Greedy: the first index of the largest logit (as torch.argmax).
      const float* last = &logits[(row - 1) * size_t(vocab)];
      const int32_t next = int32_t(std::max_element(last, last + vocab) - last);
      s.tokens.push_back(next);
      res.generated.push_back(next);
      const bool is_eos = std::find(eos.begin(), eos.end(), next) != eos.end();
      if (s.n_generated_tokens() >= req.max_new_tokens || (req.stop_at_eos && is_eos)) finished[size_t(s.id)] = true;
    }
  }
  for (auto& s : seqs) s.block_table.release_all(block_pool);
  return results;
}

}  // namespace latentserve
