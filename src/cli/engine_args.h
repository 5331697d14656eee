#pragma once
// The engine's flags, shared by `batch` and `serve`: how many requests run at once, the KV
// cache budget and prefix caching. engine_config() turns them (and the model flags) into an
// EngineConfig, sizing the cache from the GPU's free memory on cuda.
#include <CLI/CLI.hpp>

#include <cstdint>

#include "cli/cli_common.h"
#include "engine/llm_engine.h"

namespace latentserve::cli {

struct EngineArgs {
  int64_t max_num_seqs = 64;
  int64_t kv_cache_mb = -1;  // -1: 1024 on the CPU, what the GPU has left on cuda
  bool no_prefix_caching = false;
  int64_t max_model_len = 0;  // 0: config.json's max_position_embeddings

  void add_to(CLI::App* cmd);
  // Prints the device KV budget to stderr when it is sized from the GPU.
  EngineConfig engine_config(CausalLM& model, const ModelArgs& model_args) const;
};

}  // namespace latentserve::cli
