#pragma once
// HardwareSpec: the three figures the roofline needs for one device (memory bandwidth,
// peak dense bf16/fp16 FLOP/s, memory capacity), and where each came from.
// Datasheet GPUs are constants; the local CPU is measured at run time (machine_probe).
#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace latentserve::perf {

struct HardwareSpec {
  std::string name;            // "h100", "cpu", ...
  std::string description;     // "NVIDIA H100 SXM5 80GB"
  double memory_bandwidth_bytes_per_s = 0;
  double peak_flops_per_s = 0;  // dense bf16/fp16 tensor-core (GPU) or measured f32 sgemm (CPU)
  int64_t memory_bytes = 0;     // per device
  std::string source;           // where the figures came from

  // FLOP per byte at which compute time equals memory time: peak / bandwidth.
  double ridge_flop_per_byte() const { return peak_flops_per_s / memory_bandwidth_bytes_per_s; }
};

// "a100", "h100", "h200": datasheet figures. Error naming --gpu for anything else.
HardwareSpec gpu_spec(const std::string& name);
std::vector<std::string> gpu_names();  // the datasheet names, plus "cpu"

// This machine's CPU: read bandwidth and sgemm rate measured now (a few seconds),
// memory from /proc/meminfo. The GEMM shape is a decode-sized matmul that oneDNN runs well.
HardwareSpec measure_cpu_spec(ThreadPool& pool);

}  // namespace latentserve::perf
