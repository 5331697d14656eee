#include "model/architectures.h"

#include <utility>

#include "core/error.h"
#include "model/tensor_parallel.h"
#ifdef LATENTSERVE_HAVE_CUDA
#include "model/cuda/cuda_llama_model.h"
#endif

namespace latentserve {

namespace {
struct Architecture {
  const char* model_type;
  ModelFactory make;
  bool runs_on_cuda;  // backend/cuda has this architecture's kernels (model/cuda/)
};
// Adding an architecture: one file under model/ and one line here.
constexpr Architecture kArchitectures[] = {
    {"llama", make_llama_family, true},
    {"mistral", make_llama_family, true},
    {"qwen2", make_llama_family, true},
    {"qwen3", make_llama_family, true},
    {"deepseek_v2", make_deepseek, false},
    {"deepseek_v3", make_deepseek, false},
};
}  // namespace

std::vector<std::string> supported_model_types() {
  std::vector<std::string> names;
  for (const auto& a : kArchitectures) names.emplace_back(a.model_type);
  return names;
}

std::unique_ptr<CausalLM> build_causal_lm(const ModelConfig& config, std::unique_ptr<WeightSource> weights,
                                          ThreadPool& pool, const ModelOptions& options) {
  if (options.device != "cpu" && options.device != "cuda")
    fail("--device must be cpu or cuda, found '{}'", options.device);
  for (const auto& a : kArchitectures) {
    if (config.model_type != a.model_type) continue;
    if (options.device == "cpu") return make_tensor_parallel(a.make, config, std::move(weights), options, pool);
    if (options.tensor_parallel_size != 1)
      fail("--tensor-parallel-size {} on cuda: tensor parallelism runs on the cpu only so far (ranks as threads); "
           "the multi-GPU (NCCL) path is not written",
           options.tensor_parallel_size);
    if (!a.runs_on_cuda)
      fail("model_type '{}' does not run on cuda yet (the CUDA backend has the Llama family only): use --device cpu",
           a.model_type);
#ifdef LATENTSERVE_HAVE_CUDA
    return make_cuda_llama_family(config, std::move(weights), options);
#else
    fail("--device cuda: this latentserve was built without the CUDA backend (no nvcc was found at build time)");
#endif
  }
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
