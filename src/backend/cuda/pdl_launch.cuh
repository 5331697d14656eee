#pragma once
// Programmatic dependent launch (PDL) along the decode chain. A kernel launched with
// launch_pdl may be scheduled while the kernel before it on the stream still runs (once that
// one has executed allow_dependent_launch(), device_math.cuh): its launch latency and any
// prologue that reads only constant data (gemv's first weight loads) hide under that
// kernel's tail. It must call wait_for_previous_kernel() before it reads or writes global
// memory that an earlier kernel of the stream touches; the wait returns once the previous
// kernel has finished and its writes are visible (and that kernel waited for its own
// predecessor before doing anything, so every earlier kernel is done too). Without the launch
// attribute (or under a non-kernel predecessor) the wait is a no-op and ordering is the
// stream's usual one.
#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

#include "backend/cuda/kernel_error.h"

namespace latentserve::cuda {

__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// LATENTSERVE_CUDA_PDL=0 (environment, read once) launches without the attribute: a
// benchmarking knob to measure what the overlap gives.
inline bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("LATENTSERVE_CUDA_PDL");
    return !(v && v[0] == '0');
  }();
  return enabled;
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = s;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  LS_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace latentserve::cuda
