#pragma once
// What the CPU the kernels run on supports, read once. The AVX-512 kernels (GEMV, attention)
// need F, BW and VL; everything else runs the AVX2 + FMA baseline.

namespace latentserve::cpu {

inline bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

}  // namespace latentserve::cpu
