#pragma once
// The architectures latentserve can load, by config.json model_type. Each lives in
// one file under model/ and is listed once in architectures.cpp.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/causal_lm.h"
#include "model/model_options.h"
#include "model/weight_source.h"

namespace latentserve {

using ModelFactory = std::unique_ptr<CausalLM> (*)(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                                   const ModelOptions& options, ThreadPool& pool);

std::vector<std::string> supported_model_types();

// Reads DIR/config.json and DIR/*.safetensors and builds the model (weights stay mmapped).
std::unique_ptr<CausalLM> load_causal_lm(const std::filesystem::path& model_dir, ThreadPool& pool,
                                         const ModelOptions& options = {});
// Builds the model of `config` from any weight source (synthetic weights for benchmarks).
std::unique_ptr<CausalLM> build_causal_lm(const ModelConfig& config, std::unique_ptr<WeightSource> weights,
                                          ThreadPool& pool, const ModelOptions& options = {});

// One factory per architecture file.
std::unique_ptr<CausalLM> make_llama_family(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                            const ModelOptions& options, ThreadPool& pool);
std::unique_ptr<CausalLM> make_deepseek(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                        const ModelOptions& options, ThreadPool& pool);

}  // namespace latentserve
