#pragma once
// How one layer's paged K and V live in device memory: the layout every CUDA attention
// kernel and the K/V write kernel share. Same slot-major layout as the CPU cache
// (backend/cpu/cpu_kv_cache.h): slot s = block * block_size_tokens + offset, and
//   k: [n_slots, n_head_kv, head_dim_qk]   v: [n_slots, n_head_kv, head_dim_v]
// in bf16, or in e4m3fn (one byte) with a dequantisation scale per KV head:
//   value = e4m3_to_f32(code) * k_scale[h * scale_head_stride]   (per-tensor: stride 0; per-head: 1)
// Scales are powers of two; a scale of 0 means "not calibrated yet" (the write kernel's
// launcher calibrates it from the first values written, backend/cuda/rope_kv_write.h).
#include <cstdint>

namespace latentserve::cuda {

enum class KvDtype { Bf16, Fp8E4M3 };

struct DeviceKvLayer {
  void* k = nullptr;
  void* v = nullptr;
  KvDtype dtype = KvDtype::Bf16;
  float* k_scale = nullptr;  // FP8 only: [n_head_kv] (per-head) or [1] (per-tensor), on the device
  float* v_scale = nullptr;
  int scale_head_stride = 0;
};

inline int kv_element_bytes(KvDtype dtype) { return dtype == KvDtype::Bf16 ? 2 : 1; }

}  // namespace latentserve::cuda
