#include "engine/llm_engine.h"

#include <algorithm>

#include "core/error.h"
#include "engine/batch_builder.h"

#include <fmt/format.h>

namespace latentserve {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

KvCacheConfig kv_config(const CausalLM& model, const EngineConfig& c) {
  const AttentionSpec spec = model.attention_spec();
  KvCacheConfig k;
  k.block_size_tokens = c.block_size_tokens ? c.block_size_tokens : spec.kind == AttentionKind::MLA ? 64 : 16;
  if (!is_supported_block_size(k.block_size_tokens))
    fail("--block-size must be 16, 32, 64 or 128, got {}", k.block_size_tokens);
  // Bytes of one block in this cache format (rows of every layer plus their scales).
  const int64_t block_bytes = model.kv_block_bytes(k.block_size_tokens, c.kv_options);
  k.n_usable_blocks = c.n_kv_blocks > 0 ? c.n_kv_blocks : c.kv_cache_bytes / block_bytes;
  if (k.n_usable_blocks < 1)
    fail("the KV cache budget of {} bytes holds no block of {} tokens ({} bytes each)", c.kv_cache_bytes,
         k.block_size_tokens, block_bytes);
  k.enable_prefix_caching = c.enable_prefix_caching;
  // Anything besides the tokens that changes the cached KV keeps caches apart.
  k.cache_salt = fmt::format("{}/{}/kv={}/{}/rope_bf16={}", model.config().model_type, model.vocab_size(),
                             cpu::kv_cache_dtype_name(c.kv_options.dtype),
                             cpu::kv_scale_granularity_name(c.kv_options.scale), c.kv_options.mla_rope_bf16);
  return k;
}

// Completion i > 0 of request `id` runs as "<id>\x1f<i>" (ids with \x1f are refused).
std::string completion_id(const std::string& id, int32_t i) { return i == 0 ? id : fmt::format("{}\x1f{}", id, i); }

}  // namespace

LLMEngine::LLMEngine(CausalLM& model, EngineConfig config, ThreadPool& pool, const tokenizer::Tokenizer* tokenizer)
    : model_(model),
      tokenizer_(tokenizer),
      pool_(pool),
      kv_(kv_config(model, config)),
      kv_memory_(model.make_kv_cache(kv_.n_blocks(), kv_.block_size_tokens(), config.kv_options)),
      scheduler_(config.scheduler, kv_),
      sample_on_device_(config.sample_on_device) {}

void LLMEngine::add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                            std::vector<std::string> stop) {
  params.validate();
  for (const auto& s : stop)
    if (s.empty()) fail("request '{}': stop strings must not be empty", id);
  if (!stop.empty() && !tokenizer_) fail("request '{}': stop strings need a tokenizer (tokenizer.json)", id);
  if (live_ids_.count(id)) fail("request id '{}' is already in use", id);
  if (id.find('\x1f') != std::string::npos) fail("request id '{}' must not contain the byte 0x1f", id);
  if (params.n > 1 && !kv_.prefix_caching_enabled())
    fail("request '{}': n = {} shares the prompt's KV blocks through the prefix cache; enable prefix caching", id,
         params.n);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= model_.vocab_size())
      fail("request '{}': prompt token {} (at {}) is outside the vocabulary [0, {})", id, prompt[i], i,
           model_.vocab_size());
  const int32_t n = params.n;
  params.n = 1;  // each completion is one sequence
  std::vector<std::unique_ptr<Request>> completions;
  for (int32_t i = 0; i < n; ++i) {
    auto r = std::make_unique<Request>(next_seq_id_++, completion_id(id, i), prompt, params, id, i);
    r->stop = stop;
    if (tokenizer_) r->detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_, true);
    completions.push_back(std::move(r));
  }
  scheduler_.add(std::move(completions[0]));  // admission control may throw: nothing was queued then
  if (n > 1) pending_completions_[id] = {std::make_move_iterator(completions.begin() + 1), std::make_move_iterator(completions.end())};
  live_ids_[id] = {n, n};
}

bool LLMEngine::abort(const std::string& id) {
  if (!live_ids_.count(id)) return false;
  bool any = false;
  if (auto it = pending_completions_.find(id); it != pending_completions_.end()) {
    for (auto& r : it->second) {
      r->mark_aborted();
      aborted_pending_.push_back(std::move(r));
    }
    pending_completions_.erase(it);
    any = true;
  }
  for (int32_t i = 0; i < live_ids_[id].n; ++i) any |= scheduler_.abort(completion_id(id, i));
  return any;
}

ForwardBatch LLMEngine::build_batch(const StepPlan& plan, std::vector<std::vector<int32_t>>& tokens) const {
  tokens.clear();
  tokens.reserve(plan.scheduled.size());  // the chunks' spans point into these
  std::vector<BatchChunk> chunks;
  for (const auto& s : plan.scheduled) {
    const Request& r = *s.request;
    tokens.push_back(r.all_tokens());
    chunks.push_back({tokens.back(), &kv_.block_table(r.seq_id), r.n_computed_tokens, s.n_tokens,
                      int64_t(r.prompt.size()), false});
  }
  return build_forward_batch(chunks, kv_.block_size_tokens());
}

bool LLMEngine::update_text(Request& r, int32_t token, RequestOutput& out) {
  // The model's vocabulary is often padded past the tokenizer's: such an id has no text
  // (Hugging Face tokenizers drop unknown ids when decoding).
  if (!tokenizer_->id_to_token(token)) return false;
  const size_t searched_from = r.text.size();
  r.text += r.detokenizer->step(token);
  size_t longest_stop = 0;
  for (const auto& stop : r.stop) {
    longest_stop = std::max(longest_stop, stop.size());
    // Only a match that ends in the new text is new; start early enough to catch one that straddles.
    const size_t from = searched_from >= stop.size() - 1 ? searched_from - (stop.size() - 1) : 0;
    const size_t at = r.text.find(stop, from);
    if (at != std::string::npos) {
      r.text.resize(at);
      return true;
    }
  }
  // Hold back the last longest_stop - 1 bytes: they may be the start of a stop string.
  size_t safe = r.text.size() >= longest_stop ? r.text.size() - (longest_stop ? longest_stop - 1 : 0) : 0;
  // ... and never split a UTF-8 character: back up past continuation bytes (10xxxxxx).
  while (safe > r.n_text_emitted && safe < r.text.size() && (static_cast<unsigned char>(r.text[safe]) & 0xC0) == 0x80) --safe;
  if (safe > r.n_text_emitted) {
    out.new_text = r.text.substr(r.n_text_emitted, safe - r.n_text_emitted);
    r.n_text_emitted = safe;
  }
  return false;
}

// A device model chooses the tokens of this step on the device (so logits stay there) when no
// request that samples needs the host: penalties change the logits, logprobs report them.
// Then fills choices (one per logits row, in row order), drawing each sampled row's uniform
// from its request's RNG stream exactly as the host Sampler would have.
bool LLMEngine::choose_on_device(const StepPlan& plan, std::vector<TokenChoice>& choices) const {
  choices.clear();
  if (model_.device() == "cpu" || !sample_on_device_) return false;
  const auto samples = [](const Request& r, int64_t n_tokens) { return r.n_computed_tokens + n_tokens >= r.n_tokens(); };
  for (const auto& s : plan.scheduled) {
    if (!samples(*s.request, s.n_tokens)) continue;  // mid-prompt chunk: no logits row
    const SamplingParams& p = s.request->params;
    if (p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 || p.logprobs)
      return false;
  }
  for (const auto& s : plan.scheduled) {
    Request& r = *s.request;
    if (!samples(r, s.n_tokens)) continue;
    const SamplingParams& p = r.params;
    TokenChoice c;
    if (!p.is_greedy()) {
      c.temperature = float(p.temperature);
      c.top_k = p.top_k;
      c.top_p = float(p.top_p);
      c.min_p = float(p.min_p);
      c.uniform = r.rng.next_uniform();
    }
    choices.push_back(c);
  }
  return true;
}

std::vector<RequestOutput> LLMEngine::step() {
  const auto t0 = Clock::now();
  StepPlan plan = scheduler_.schedule();
  const auto t1 = Clock::now();
  metrics_.scheduler_seconds += std::chrono::duration<double>(t1 - t0).count();
  metrics_.n_preemptions += int64_t(plan.preempted.size());

  std::vector<RequestOutput> outputs;
  if (!plan.empty()) {
    std::vector<std::vector<int32_t>> tokens;
    ForwardBatch batch = build_batch(plan, tokens);
    const size_t vocab = size_t(model_.vocab_size());
    const bool on_device = choose_on_device(plan, choices_);
    if (on_device) {
      device_tokens_.resize(batch.logits_indices.size());
      model_.forward_choose(batch, *kv_memory_, choices_, device_tokens_.data());
    } else {
      logits_.resize(batch.logits_indices.size() * vocab);
      model_.forward(batch, *kv_memory_, logits_.data());
    }
    metrics_.forward_seconds += std::chrono::duration<double>(Clock::now() - t1).count();
    for (const auto& s : plan.scheduled)
      if (s.request->n_computed_tokens < int64_t(s.request->prompt.size()))
        metrics_.prompt_tokens_computed += std::min<int64_t>(s.n_tokens, int64_t(s.request->prompt.size()) - s.request->n_computed_tokens);
    scheduler_.on_step_computed(plan);

    // Sample for every request whose chunk reached its last known token.
    const auto now = Clock::now();
    size_t row = 0;
    const auto& eos = model_.config().eos_token_ids;
    const std::vector<int32_t> eos32(eos.begin(), eos.end());
    for (const auto& s : plan.scheduled) {
      Request& r = *s.request;
      if (r.n_computed_tokens != r.n_tokens()) continue;  // a prefill chunk mid-prompt
      SampleResult sample;
      if (on_device) {
        sample.token = device_tokens_[row++];
      } else {
        const std::span<const float> logits(&logits_[row++ * vocab], vocab);
        sample = sampler_.sample(logits, r.params, r.prompt, r.output, r.rng);
      }
      if (!r.first_token_time) {
        r.first_token_time = now;
        metrics_.prompt_tokens_total += int64_t(r.prompt.size());
        metrics_.prompt_tokens_cached += r.n_cached_tokens;
      } else {
        record_sample(metrics_.itl_ms, ms_between(r.last_token_time, now));
      }
      r.last_token_time = now;
      r.output.push_back(sample.token);
      ++metrics_.generated_tokens;
      RequestOutput out;
      out.id = r.user_id;
      out.index = r.completion_index;
      out.new_tokens = {sample.token};
      if (r.params.logprobs) out.new_samples.push_back(std::move(sample));
      r.finish_reason = finish_reason_after(r.params, r.output.back(), int64_t(r.output.size()), eos32);
      if (r.detokenizer && update_text(r, r.output.back(), out)) r.finish_reason = FinishReason::Stop;
      if (r.finish_reason != FinishReason::None) {
        r.status = RequestStatus::Finished;
        r.finish_time = now;
      }
      outputs.push_back(std::move(out));
      // Completion 0 has computed the prompt: the other n - 1 join the queue and find its
      // full blocks in the prefix cache.
      if (r.output.size() == 1 && r.completion_index == 0) {
        if (auto it = pending_completions_.find(r.user_id); it != pending_completions_.end()) {
          for (auto& c : it->second) scheduler_.add(std::move(c));
          pending_completions_.erase(it);
        }
      }
    }
  }

  std::vector<std::unique_ptr<Request>> finished = scheduler_.take_finished();
  for (auto& r : aborted_pending_) finished.push_back(std::move(r));
  aborted_pending_.clear();
  for (auto& r : finished) {
    if (--live_ids_[r->user_id].unfinished == 0) live_ids_.erase(r->user_id);
    auto it = std::find_if(outputs.begin(), outputs.end(),
                           [&](const auto& o) { return o.id == r->user_id && o.index == r->completion_index; });
    if (it == outputs.end()) {
      outputs.push_back({});
      it = outputs.end() - 1;
      it->id = r->user_id;
      it->index = r->completion_index;
    }
    it->finished = true;
    it->finish_reason = r->finish_reason_name();
    it->output_tokens = r->output;
    if (r->detokenizer && !r->aborted) {  // the held-back tail is final now
      if (r->finish_reason != FinishReason::Stop) r->text += r->detokenizer->finish();
      it->new_text += r->text.substr(r->n_text_emitted);
      r->n_text_emitted = r->text.size();
    }
    it->text = r->text;
    it->n_prompt_tokens = int64_t(r->prompt.size());
    it->n_cached_tokens = r->n_cached_tokens;
    it->n_preemptions = r->n_preemptions;
    if (r->first_token_time) {
      it->ttft_ms = ms_between(r->arrival_time, *r->first_token_time);
      record_sample(metrics_.ttft_ms, it->ttft_ms);
      if (r->output.size() >= 2) {
        it->tpot_ms = ms_between(*r->first_token_time, r->last_token_time) / double(r->output.size() - 1);
        record_sample(metrics_.tpot_ms, it->tpot_ms);
      }
    }
    (r->aborted ? metrics_.n_aborted : metrics_.n_finished) += 1;
  }
  const KvCacheStats kv_stats = kv_.stats();
  metrics_.last_kv_usage = kv_stats.usage();
  metrics_.max_kv_usage = std::max(metrics_.max_kv_usage, metrics_.last_kv_usage);
  metrics_.n_running = scheduler_.n_running();
  metrics_.n_waiting = scheduler_.n_waiting();
  ++metrics_.n_steps;
  metrics_.step_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return outputs;
}

}  // namespace latentserve
