#include "backend/cuda/cuda_machine_probe.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/random_fill.h"
#include "backend/cuda/read_roof.h"

namespace latentserve::cuda {
namespace {

// Median milliseconds of `repeats` runs of `work` on the stream, after one warm-up.
template <typename Work>
double median_ms(cudaStream_t s, int repeats, Work work) {
  cudaEvent_t start, stop;
  LS_CUDA_CHECK(cudaEventCreate(&start));
  LS_CUDA_CHECK(cudaEventCreate(&stop));
  work();
  std::vector<float> ms;
  for (int i = 0; i < repeats; ++i) {
    LS_CUDA_CHECK(cudaEventRecord(start, s));
    work();
    LS_CUDA_CHECK(cudaEventRecord(stop, s));
    LS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    LS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

MeasuredRoofs measure_roofs(const CudaDevice& device) {
  const cudaStream_t s = device.stream();
  MeasuredRoofs r;
  {
    const size_t bytes = size_t(4) << 30;  // ~70x the H200's 60 MB L2
    DeviceBuffer data(bytes), sums(size_t(read_only_pass_blocks()) * sizeof(float));
    fill_uniform_bf16(data.data(), int64_t(bytes / 2), 0.0f, 1.0f, 7, s);
    const double ms = median_ms(s, 10, [&] { read_only_pass(data.data(), bytes, sums.as<float>(), read_only_pass_blocks(), s); });
    r.read_bytes_per_s = double(bytes) / (ms * 1e-3);
  }
  {
    const int64_t n = 8192;
    DeviceBuffer a(size_t(n * n) * 2), b(size_t(n * n) * 2), c(size_t(n * n) * 2);
    fill_uniform_bf16(a.data(), n * n, 0.0f, 1.0f, 1, s);
    fill_uniform_bf16(b.data(), n * n, 0.0f, 1.0f, 2, s);
    Gemm gemm;
    const double ms = median_ms(s, 10, [&] { gemm.bf16(a.data(), b.data(), c.data(), n, n, n, false, nullptr, s); });
    r.bf16_gemm_flops_per_s = 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3);
  }
  return r;
}

perf::HardwareSpec measured_gpu_spec(const CudaDevice& device, const MeasuredRoofs& roofs) {
  perf::HardwareSpec spec;
  spec.name = "cuda";
  spec.description = device.name();
  spec.memory_bandwidth_bytes_per_s = roofs.read_bytes_per_s;
  spec.peak_flops_per_s = roofs.bf16_gemm_flops_per_s;
  spec.memory_bytes = int64_t(device.memory_info().second);
  spec.source = fmt::format("measured in this run: read-only pass over 4 GiB ({:.2f} TB/s), cuBLASLt bf16 GEMM 8192^3 "
                            "({:.0f} TFLOP/s)",
                            roofs.read_bytes_per_s / 1e12, roofs.bf16_gemm_flops_per_s / 1e12);
  return spec;
}

}  // namespace latentserve::cuda
