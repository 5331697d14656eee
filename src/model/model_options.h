#pragma once
// Run-time choices about how a model computes (not what it is: that is ModelConfig).
#include "attention/mla_attention.h"

namespace latentserve {

struct ModelOptions {
  MlaPath mla_path = MlaPath::Auto;  // MLA models: --attention auto|naive|absorbed
};

}  // namespace latentserve
