#pragma once
// Helpers shared by the GPU tests: skip (and say why) when no GPU is present, device
// buffers filled from host vectors, bf16 round trips, and NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "core/bf16.h"

// In a TEST body: GTEST_SKIP with the reason when this machine has no CUDA GPU.
#define LS_REQUIRE_GPU()                                                                     \
  do {                                                                                       \
    if (::latentserve::cuda::device_count() == 0)                                            \
      GTEST_SKIP() << ::latentserve::cuda::no_device_reason() << " (GPU tests run on the device machine)"; \
  } while (0)

namespace latentserve::testing {

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16::from_f32(x[i]).bits;
  return out;
}
inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16::from_bits(x[i]).to_f32();
  return out;
}
// Rounds each value to bf16 and back (so a reference sees exactly what the GPU sees).
inline std::vector<float> round_to_bf16(std::vector<float> x) {
  for (auto& v : x) v = bf16::from_f32(v).to_f32();
  return x;
}

// n values drawn from N(0, scale^2), reproducible from seed.
inline std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& host) {
  cuda::DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}
template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer& buffer, size_t n) {
  std::vector<T> host(n);
  buffer.download(host.data(), n * sizeof(T));
  return host;
}
// A device buffer of n bf16 NaNs (0x7fc0): any element a kernel fails to write stays NaN.
inline cuda::DeviceBuffer poisoned_bf16(size_t n) { return to_device(std::vector<uint16_t>(n, uint16_t(0x7fc0))); }
inline cuda::DeviceBuffer poisoned_f32(size_t n) { return to_device(std::vector<float>(n, std::nanf(""))); }

// ||a - b|| / ||b|| (NaN anywhere gives NaN, which fails every comparison).
inline double relative_l2(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace latentserve::testing
