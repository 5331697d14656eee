#include "model/architectures.h"

#include <utility>

#include "core/error.h"

namespace latentserve {

namespace {
struct Architecture {
  const char* model_type;
  ModelFactory make;
};
// Adding an architecture: one file under model/ and one line here.
constexpr Architecture kArchitectures[] = {
    {"llama", make_llama_family},
    {"mistral", make_llama_family},
    {"qwen2", make_llama_family},
    {"qwen3", make_llama_family},
    {"deepseek_v2", make_deepseek},
    {"deepseek_v3", make_deepseek},
};
}  // namespace

std::vector<std::string> supported_model_types() {
  std::vector<std::string> names;
  for (const auto& a : kArchitectures) names.emplace_back(a.model_type);
  return names;
}

std::unique_ptr<CausalLM> build_causal_lm(const ModelConfig& config, std::unique_ptr<WeightSource> weights,
                                          ThreadPool& pool, const ModelOptions& options) {
  for (const auto& a : kArchitectures)
    if (config.model_type == a.model_type) return a.make(config, std::move(weights), options, pool);
  std::string supported;
  for (const auto& name : supported_model_types()) supported += (supported.empty() ? "" : ", ") + name;
  fail("model_type '{}' is not supported (supported: {})", config.model_type, supported);
}

std::unique_ptr<CausalLM> load_causal_lm(const std::filesystem::path& model_dir, ThreadPool& pool,
                                         const ModelOptions& options) {
  ModelConfig config = ModelConfig::load(model_dir);
  return with_context(model_dir.string(), [&] {
    return build_causal_lm(config, std::make_unique<CheckpointWeights>(Checkpoint::open(model_dir)), pool, options);
  });
}

}  // namespace latentserve
