#pragma once
// Measures the GPU's two roofs in the run that uses them (METHOD: measure, don't trust the
// datasheet): the device-memory read bandwidth (a read-only pass of our own over a buffer
// many times the L2, random data) and the dense bf16 GEMM rate (cuBLASLt, 8192^3, random
// data). Each is the median of several timed repeats after a warm-up, with CUDA events.
#include "backend/cuda/cuda_device.h"
#include "perf/gpu_specs.h"

namespace latentserve::cuda {

struct MeasuredRoofs {
  double read_bytes_per_s = 0;
  double bf16_gemm_flops_per_s = 0;
};

MeasuredRoofs measure_roofs(const CudaDevice& device);

// As a perf::HardwareSpec ("cuda"), for the planner's floors.
perf::HardwareSpec measured_gpu_spec(const CudaDevice& device, const MeasuredRoofs& roofs);

}  // namespace latentserve::cuda
