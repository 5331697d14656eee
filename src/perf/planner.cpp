#include "perf/planner.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace latentserve::perf {

void validate(const Workload& w) {
  if (w.context_tokens <= 0) fail("--context must be a positive number of tokens, got {}", w.context_tokens);
  if (w.batch <= 0) fail("--batch must be at least 1, got {}", w.batch);
  if (w.tp <= 0) fail("--tp must be at least 1, got {}", w.tp);
  if (!(w.memory_utilization > 0 && w.memory_utilization <= 1))
    fail("--gpu-memory-utilization must be in (0, 1], got {}", w.memory_utilization);
}

std::string format_bytes(double bytes) {
  const char* dec[] = {"B", "KB", "MB", "GB", "TB"};
  const char* bin[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (i < 4 && std::abs(bytes) >= std::pow(1000.0, i + 1)) ++i;
  if (i == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.2f} {} ({:.2f} {})", bytes / std::pow(1000.0, i), dec[i], bytes / std::pow(1024.0, i), bin[i]);
}

namespace {

std::string regime_of(const Plan& p) {
  if (!p.batch_fits) return "capacity-bound";
  const std::string d = p.decode.dominant_term();
  return d == "compute" ? "compute-bound" : d == "weights" ? "weight-bound" : "KV-bound";
}

}  // namespace

Plan make_plan(const ModelShape& model, const HardwareSpec& hw, const Workload& w) {
  validate(w);
  Plan p;
  p.model = model;
  p.hardware = hw;
  p.workload = w;
  p.params = count_params(model);
  const double wsize = double(dtype_size_bytes(model.weight_dtype));
  p.weight_bytes_total = double(p.params.total) * wsize;
  p.weight_bytes_active_per_token = double(p.params.active_per_token) * wsize;
  p.weight_bytes_per_gpu = p.weight_bytes_total / double(w.tp);
  p.kv = kv_size(model.attention, model.n_layer, w.kv_dtype, w.context_tokens, w.batch);
  p.tp_layout = tp_kv_layout(model.attention, model.n_layer, w.kv_dtype, w.tp);
  p.kv_bytes_per_sequence_per_gpu = double(p.tp_layout.bytes_per_token_per_gpu) * double(w.context_tokens);
  p.kv_bytes_batch_per_gpu = p.kv_bytes_per_sequence_per_gpu * double(w.batch);
  p.usable_memory_bytes_per_gpu = double(hw.memory_bytes) * w.memory_utilization;
  p.free_memory_after_weights_bytes_per_gpu = p.usable_memory_bytes_per_gpu - p.weight_bytes_per_gpu;
  p.max_concurrent_sequences =
      std::max<int64_t>(0, int64_t(std::floor(p.free_memory_after_weights_bytes_per_gpu / p.kv_bytes_per_sequence_per_gpu)));
  p.batch_fits = p.max_concurrent_sequences >= w.batch;
  p.decode = decode_step(model, hw, w.batch, w.context_tokens, p.tp_layout);
  p.ttft = prefill(model, hw, w.context_tokens, p.tp_layout);
  p.ridge_flop_per_byte = hw.ridge_flop_per_byte();
  p.regime = regime_of(p);

  if (p.free_memory_after_weights_bytes_per_gpu <= 0)
    p.notes.push_back(fmt::format("the weights ({} per GPU) do not fit in {} usable per GPU: raise --tp",
                                  format_bytes(p.weight_bytes_per_gpu), format_bytes(p.usable_memory_bytes_per_gpu)));
  else if (!p.batch_fits)
    p.notes.push_back(fmt::format("batch {} at {} tokens needs {} of KV per GPU; only {} sequences fit", w.batch,
                                  w.context_tokens, format_bytes(p.kv_bytes_batch_per_gpu), p.max_concurrent_sequences));
  if (!p.tp_layout.note.empty()) p.notes.push_back(p.tp_layout.note);
  if (model.moe.enabled())
    p.notes.push_back(fmt::format("MoE: batch {} touches {:.1f} of {} routed experts per layer (uniform routing)",
                                  w.batch, expected_experts_touched(model.moe, double(w.batch)), model.moe.n_routed_experts));
  if (w.tp > 1) p.notes.push_back("TP all-reduce time is not modelled");

  if (model.attention.kind == AttentionKind::MLA) {
    p.mha_equivalent_kv = kv_size(mha_equivalent(model.attention), model.n_layer, w.kv_dtype, w.context_tokens, w.batch);
    p.mla_equivalent_kv_heads = mla_equivalent_kv_heads(model.attention);
    if (w.tp > 1) {
      DpAttention dp;
      const double share = 1.0 / double(w.tp);
      dp.max_concurrent_sequences = p.max_concurrent_sequences * w.tp;
      dp.kv_bytes_batch_per_gpu = p.kv_bytes_batch_per_gpu * share;
      dp.decode = decode_step(model, hw, w.batch, w.context_tokens, p.tp_layout, share);
      p.dp_attention = dp;
      p.notes.push_back(fmt::format(
          "recommended: data-parallel attention: {} sequences fit instead of {}, TPOT {:.2f} ms instead of {:.2f} ms",
          dp.max_concurrent_sequences, p.max_concurrent_sequences, dp.decode.time_ms, p.decode.time_ms));
    }
  }
  return p;
}

namespace {

nlohmann::json step_json(const StepCost& c) {
  return {{"weight_bytes", c.weight_bytes}, {"kv_bytes", c.kv_bytes}, {"bytes", c.bytes()}, {"flops", c.flops},
          {"arithmetic_intensity_flop_per_byte", c.arithmetic_intensity_flop_per_byte()},
          {"memory_ms", c.memory_ms}, {"compute_ms", c.compute_ms}, {"time_ms", c.time_ms},
          {"dominant_term", c.dominant_term()}};
}

nlohmann::json kv_json(const KvSize& k) {
  return {{"bytes_per_token_per_layer", k.bytes_per_token_per_layer}, {"bytes_per_token", k.bytes_per_token},
          {"bytes_per_sequence", k.bytes_per_sequence}, {"bytes_batch", k.bytes_batch}};
}

}  // namespace

nlohmann::json plan_to_json(const Plan& p) {
  const auto& a = p.model.attention;
  nlohmann::json j = {
      {"model", {{"name", p.model.name}, {"source", p.model.source}, {"n_layer", p.model.n_layer},
                 {"hidden_size", p.model.hidden_size}, {"attention", attention_label(a)},
                 {"attention_kind", attention_kind_name(a.kind)}, {"n_head", a.n_head}, {"n_head_kv", a.n_head_kv},
                 {"head_dim_qk", a.head_dim_qk}, {"head_dim_v", a.head_dim_v}, {"kv_lora_rank", a.kv_lora_rank},
                 {"qk_rope_head_dim", a.qk_rope_head_dim}, {"weight_dtype", kv_dtype_name(p.model.weight_dtype)}}},
      {"hardware", {{"name", p.hardware.name}, {"description", p.hardware.description},
                    {"memory_bandwidth_bytes_per_s", p.hardware.memory_bandwidth_bytes_per_s},
                    {"peak_flops_per_s", p.hardware.peak_flops_per_s}, {"memory_bytes", p.hardware.memory_bytes},
                    {"ridge_flop_per_byte", p.ridge_flop_per_byte}, {"source", p.hardware.source}}},
      {"workload", {{"context_tokens", p.workload.context_tokens}, {"batch", p.workload.batch}, {"tp", p.workload.tp},
                    {"kv_cache_dtype", kv_dtype_name(p.workload.kv_dtype)},
                    {"gpu_memory_utilization", p.workload.memory_utilization}}},
      {"params", {{"total", p.params.total}, {"active_per_token", p.params.active_per_token}}},
      {"weights", {{"bytes_total", p.weight_bytes_total}, {"bytes_active_per_token", p.weight_bytes_active_per_token},
                   {"bytes_per_gpu", p.weight_bytes_per_gpu}}},
      {"kv", kv_json(p.kv)},
      {"tp", {{"tp", p.tp_layout.tp}, {"query_heads_per_gpu", p.tp_layout.query_heads_per_gpu},
              {"kv_heads_per_gpu", p.tp_layout.kv_heads_per_gpu},
              {"kv_head_replication", p.tp_layout.kv_head_replication},
              {"latent_duplicated", p.tp_layout.latent_duplicated},
              {"kv_bytes_per_token_per_gpu", p.tp_layout.bytes_per_token_per_gpu},
              {"kv_bytes_per_sequence_per_gpu", p.kv_bytes_per_sequence_per_gpu},
              {"kv_bytes_batch_per_gpu", p.kv_bytes_batch_per_gpu}}},
      {"capacity", {{"usable_memory_bytes_per_gpu", p.usable_memory_bytes_per_gpu},
                    {"free_memory_after_weights_bytes_per_gpu", p.free_memory_after_weights_bytes_per_gpu},
                    {"max_concurrent_sequences", p.max_concurrent_sequences}, {"batch_fits", p.batch_fits}}},
      {"decode", step_json(p.decode)},
      {"tpot_ms", p.decode.time_ms},
      {"ttft_ms", p.ttft.time_ms},
      {"prefill", step_json(p.ttft)},
      {"regime", p.regime},
      {"notes", p.notes}};
  if (p.mha_equivalent_kv) {
    j["mla"] = {{"mha_equivalent_kv", kv_json(*p.mha_equivalent_kv)},
                {"compression_vs_mha", double(p.mha_equivalent_kv->bytes_per_token) / double(p.kv.bytes_per_token)},
                {"equivalent_gqa_kv_heads", p.mla_equivalent_kv_heads}};
    if (p.dp_attention)
      j["mla"]["dp_attention"] = {{"max_concurrent_sequences", p.dp_attention->max_concurrent_sequences},
                                  {"kv_bytes_batch_per_gpu", p.dp_attention->kv_bytes_batch_per_gpu},
                                  {"decode", step_json(p.dp_attention->decode)},
                                  {"tpot_ms", p.dp_attention->decode.time_ms}};
  }
  return j;
}

std::string plan_to_text(const Plan& p) {
  const auto& a = p.model.attention;
  const auto& w = p.workload;
  std::string s;
  auto line = [&s](const std::string& label, const std::string& value) { s += fmt::format("  {:<38} {}\n", label, value); };
  s += fmt::format("model     {} ({} {}: {} layers, hidden {}, {} heads, {})\n", p.model.name,
                   attention_kind_name(a.kind), attention_label(a), p.model.n_layer, p.model.hidden_size, a.n_head,
                   a.kind == AttentionKind::MLA
                       ? fmt::format("kv_lora_rank {} + qk_rope {}", a.kv_lora_rank, a.qk_rope_head_dim)
                       : fmt::format("{} KV heads x head dim {}", a.n_head_kv, a.head_dim_qk));
  s += fmt::format("          shape from: {}\n", p.model.source);
  s += fmt::format("device    {} x {}: {:.0f} GB/s, {:.1f} TFLOP/s, {} each\n", w.tp, p.hardware.description,
                   p.hardware.memory_bandwidth_bytes_per_s / 1e9, p.hardware.peak_flops_per_s / 1e12,
                   format_bytes(double(p.hardware.memory_bytes)));
  s += fmt::format("          figures from: {}\n", p.hardware.source);
  s += fmt::format("workload  context {} tokens, batch {}, TP {}, KV cache {}, weights {}\n\n", w.context_tokens,
                   w.batch, w.tp, kv_dtype_name(w.kv_dtype), kv_dtype_name(p.model.weight_dtype));

  s += "KV cache\n";
  line("per token per layer", format_bytes(double(p.kv.bytes_per_token_per_layer)));
  line(fmt::format("per token ({} layers)", p.model.n_layer), format_bytes(double(p.kv.bytes_per_token)));
  line(fmt::format("per sequence ({} tokens)", w.context_tokens), format_bytes(double(p.kv.bytes_per_sequence)));
  line(fmt::format("batch ({} sequences)", w.batch), format_bytes(double(p.kv.bytes_batch)));
  if (p.mha_equivalent_kv) {
    line("MHA-equivalent per sequence", format_bytes(double(p.mha_equivalent_kv->bytes_per_sequence)));
    line("MLA compression vs MHA", fmt::format("{:.1f}x", double(p.mha_equivalent_kv->bytes_per_token) / double(p.kv.bytes_per_token)));
    line("MLA latent = standard KV heads", fmt::format("{:.2f} (of head dim {})", p.mla_equivalent_kv_heads, a.head_dim_v));
  }
  s += "\nWeights\n";
  line("parameters total", fmt::format("{:.2f} B", double(p.params.total) / 1e9));
  line("parameters active per token", fmt::format("{:.2f} B", double(p.params.active_per_token) / 1e9));
  line("weight bytes total", format_bytes(p.weight_bytes_total));
  line("weight bytes active per token", format_bytes(p.weight_bytes_active_per_token));
  line("weight bytes per GPU", format_bytes(p.weight_bytes_per_gpu));

  s += fmt::format("\nTensor parallelism (TP {})\n", w.tp);
  line("query heads per GPU", std::to_string(p.tp_layout.query_heads_per_gpu));
  line(a.kind == AttentionKind::MLA ? "latent copies per GPU" : "KV heads per GPU", std::to_string(p.tp_layout.kv_heads_per_gpu));
  line("KV head replication factor", fmt::format("{}x", p.tp_layout.kv_head_replication));
  line("KV per token per GPU", format_bytes(double(p.tp_layout.bytes_per_token_per_gpu)));
  line("KV for the batch per GPU", format_bytes(p.kv_bytes_batch_per_gpu));

  s += "\nCapacity (per GPU)\n";
  line(fmt::format("usable memory ({:.0f}%)", w.memory_utilization * 100), format_bytes(p.usable_memory_bytes_per_gpu));
  line("left after weights", format_bytes(p.free_memory_after_weights_bytes_per_gpu));
  line(fmt::format("max concurrent sequences @ {} tok", w.context_tokens), std::to_string(p.max_concurrent_sequences));
  line("batch fits", p.batch_fits ? "yes" : "NO");

  s += "\nDecode step (per GPU)\n";
  line("weight bytes read", format_bytes(p.decode.weight_bytes));
  line("KV bytes read", format_bytes(p.decode.kv_bytes));
  line("FLOPs", fmt::format("{:.3g} GFLOP", p.decode.flops / 1e9));
  line("arithmetic intensity", fmt::format("{:.1f} FLOP/byte (ridge point {:.1f})",
                                           p.decode.arithmetic_intensity_flop_per_byte(), p.ridge_flop_per_byte));
  line("memory time / compute time", fmt::format("{:.2f} ms / {:.2f} ms", p.decode.memory_ms, p.decode.compute_ms));
  line("predicted TPOT (roofline floor)", fmt::format("{:.2f} ms  ({:.0f} tokens/s for the batch)", p.decode.time_ms,
                                                      double(w.batch) * 1e3 / p.decode.time_ms));
  line("predicted TTFT (prefill of context)", fmt::format("{:.1f} ms  ({} bound; {:.3g} TFLOP)", p.ttft.time_ms,
                                                          p.ttft.dominant_term() == "compute" ? "compute" : "memory",
                                                          p.ttft.flops / 1e12));
  line("regime", p.regime);
  if (p.dp_attention) {
    s += "\nMLA with data-parallel attention (alternative)\n";
    line("KV for the batch per GPU", format_bytes(p.dp_attention->kv_bytes_batch_per_gpu));
    line("max concurrent sequences", std::to_string(p.dp_attention->max_concurrent_sequences));
    line("predicted TPOT", fmt::format("{:.2f} ms", p.dp_attention->decode.time_ms));
  }
  if (!p.notes.empty()) {
    s += "\nNotes\n";
    for (const auto& n : p.notes) s += "  - " + n + "\n";
  }
  return s;
}

}  // namespace latentserve::perf
