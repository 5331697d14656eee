#pragma once
// Named model shapes with their published sizes (config.json on the Hugging Face Hub),
// for `latentserve plan --preset NAME` and `bench decode --synthetic NAME`.
#include <string>
#include <vector>

#include "perf/model_shape.h"

namespace latentserve::perf {

// Error naming `flag` and listing the presets for an unknown name.
ModelShape model_preset(const std::string& name, const std::string& flag = "--preset");
std::vector<std::string> preset_names();

// The preset as a config.json that the engine's ModelConfig parses (llama-family only:
// the engine builds these with SyntheticWeights). Error for an MLA preset.
std::string preset_config_json(const ModelShape& shape);

}  // namespace latentserve::perf
