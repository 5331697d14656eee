#pragma once
// The Llama family (llama, mistral, qwen2, qwen3) on an NVIDIA GPU: the same decoder as
// model/llama_family.cpp with bf16 weights and activations in device memory, an f32
// residual stream, cuBLASLt GEMMs over fused q|k|v and gate|up weights, and the paged
// attention kernels of backend/cuda. Pure-decode steps are captured into CUDA graphs, one
// per (batch bucket, context bucket), and replayed; other steps run eagerly.
#include <memory>

#include "model/causal_lm.h"
#include "model/model_options.h"
#include "model/weight_source.h"

namespace latentserve {

std::unique_ptr<CausalLM> make_cuda_llama_family(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                                 const ModelOptions& options);

}  // namespace latentserve
