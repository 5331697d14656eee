#pragma once
// Run-time choices about how a model computes (not what it is: that is ModelConfig).
#include <string>

#include "attention/mla_attention.h"

namespace latentserve {

struct ModelOptions {
  MlaPath mla_path = MlaPath::Auto;  // MLA models: --attention auto|naive|absorbed
  std::string device = "cpu";        // --device cpu|cuda
  int device_ordinal = 0;            // which GPU (cuda)
  bool cuda_graphs = true;           // cuda: replay decode steps from captured graphs (--enforce-eager turns off)
};

}  // namespace latentserve
