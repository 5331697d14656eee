#pragma once
// The planner: for a model shape, a device and a workload (context, batch, TP, KV dtype)
// it answers "what will this cost?": KV sizes, weight bytes, how many sequences fit,
// the decode step's bytes and FLOPs against the ridge point, predicted TPOT and TTFT,
// the regime, and how TP lays out the KV heads. Pure arithmetic: never runs a kernel.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perf/gpu_specs.h"
#include "perf/kv_calculator.h"
#include "perf/model_shape.h"
#include "perf/roofline.h"

namespace latentserve::perf {

struct Workload {
  int64_t context_tokens = 8192;  // tokens in each sequence's cache at the decode step (and the prompt of TTFT)
  int64_t batch = 1;              // concurrent sequences decoding
  int64_t tp = 1;                 // tensor-parallel ranks (GPUs)
  DType kv_dtype = DType::BF16;
  double memory_utilization = 0.9;  // share of each GPU's memory for weights + KV (vLLM's default)
};
// Errors name the flag: --context, --batch, --tp, --gpu-memory-utilization.
void validate(const Workload& w);

// MLA under TP: data-parallel attention, each rank holding 1/tp of the sequences' latents.
struct DpAttention {
  int64_t max_concurrent_sequences = 0;
  double kv_bytes_batch_per_gpu = 0;
  StepCost decode;
};

struct Plan {
  ModelShape model;
  HardwareSpec hardware;
  Workload workload;
  ParamCounts params;
  double weight_bytes_total = 0;
  double weight_bytes_active_per_token = 0;  // MoE: the experts one token uses
  double weight_bytes_per_gpu = 0;
  KvSize kv;  // the model's cache, counted once (no TP replication)
  TpKvLayout tp_layout;
  double kv_bytes_per_sequence_per_gpu = 0;
  double kv_bytes_batch_per_gpu = 0;
  double usable_memory_bytes_per_gpu = 0;
  double free_memory_after_weights_bytes_per_gpu = 0;  // negative: the weights alone do not fit
  int64_t max_concurrent_sequences = 0;                 // at context_tokens
  bool batch_fits = false;
  StepCost decode;  // per GPU; decode.time_ms is the predicted TPOT
  StepCost ttft;    // prefill of one prompt of context_tokens
  double ridge_flop_per_byte = 0;
  std::string regime;  // weight-bound, KV-bound, compute-bound, capacity-bound
  // MLA only
  std::optional<KvSize> mha_equivalent_kv;
  double mla_equivalent_kv_heads = 0;
  std::optional<DpAttention> dp_attention;
  std::vector<std::string> notes;
};

Plan make_plan(const ModelShape& model, const HardwareSpec& hardware, const Workload& workload);
nlohmann::json plan_to_json(const Plan& plan);
std::string plan_to_text(const Plan& plan);

// "21.47 GB (20.00 GiB)": decimal and binary units, both labelled.
std::string format_bytes(double bytes);

}  // namespace latentserve::perf
