#pragma once
// Run-time choices about how a model computes (not what it is: that is ModelConfig).
#include <string>

#include "attention/mla_attention.h"

namespace latentserve {

class Communicator;

// Which tensor-parallel rank a model object is (model/tensor_parallel.h builds the ranks):
// it holds 1/size of the heads and MLP columns and calls comm's collectives. size 1: the
// whole model, no collectives.
struct TpRank {
  int rank = 0;
  int size = 1;
  Communicator* comm = nullptr;  // size > 1 only
};

struct ModelOptions {
  MlaPath mla_path = MlaPath::Auto;  // MLA models: --attention auto|naive|absorbed
  std::string device = "cpu";        // --device cpu|cuda
  int device_ordinal = 0;            // which GPU (cuda)
  bool cuda_graphs = true;           // cuda: replay decode steps from captured graphs (--enforce-eager turns off)
  int tensor_parallel_size = 1;      // --tensor-parallel-size: > 1 builds that many ranks (cpu: threads)
  TpRank tp_rank;                    // set by the tensor-parallel builder for each rank it makes
};

}  // namespace latentserve
