#pragma once
// How one layer's paged K and V live in device memory: the layout every CUDA attention
// kernel and the K/V write kernel share. Slot s = block * block_size + offset; one row is one
// (slot, KV head): head_dim elements. Two orders of the rows (KvLayout):
//   SlotMajor (the CPU cache's, backend/cpu/cpu_kv_cache.h):
//     k: [n_blocks, block_size, n_head_kv, head_dim_qk]   v: the same with head_dim_v
//   HeadMajor (each KV head's rows of a block contiguous):
//     k: [n_blocks, n_head_kv, block_size, head_dim_qk]
// A block is the same contiguous bytes in both (copy_block does not care); a decode CTA reads
// one KV head, so HeadMajor gives it block_size x row bytes in a run instead of one row.
// Rows are in bf16, or in e4m3fn (one byte) with a dequantisation scale per KV head:
//   value = e4m3_to_f32(code) * k_scale[h * scale_head_stride]   (per-tensor: stride 0; per-head: 1)
// Scales are powers of two; a scale of 0 means "not calibrated yet" (the write kernel's
// launcher calibrates it from the first values written, backend/cuda/rope_kv_write.h).
#include <cstdint>

#include "backend/cuda/kernel_error.h"

namespace latentserve::cuda {

enum class KvDtype { Bf16, Fp8E4M3 };
enum class KvLayout { SlotMajor, HeadMajor };

#ifdef __CUDACC__
#define LS_KV_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LS_KV_HOST_DEVICE inline
#endif

// The row index of (block, offset in the block, KV head): times the row's elements (or bytes)
// it is where that row starts.
LS_KV_HOST_DEVICE int64_t kv_row_index(KvLayout layout, int64_t block, int offset, int head, int n_head_kv,
                                       int block_size) {
  return layout == KvLayout::SlotMajor ? (block * block_size + offset) * n_head_kv + head
                                       : (block * n_head_kv + head) * block_size + offset;
}
// The same from a slot (block * block_size + offset); block_size is only read for HeadMajor.
LS_KV_HOST_DEVICE int64_t kv_slot_row_index(KvLayout layout, int64_t slot, int head, int n_head_kv, int block_size) {
  return layout == KvLayout::SlotMajor ? slot * n_head_kv + head
                                       : kv_row_index(layout, slot / block_size, int(slot % block_size), head, n_head_kv,
                                                      block_size);
}
// Rows between KV head h and h + 1 of one slot: the heads of a slot are evenly spaced in both orders.
LS_KV_HOST_DEVICE int64_t kv_head_row_stride(KvLayout layout, int block_size) {
  return layout == KvLayout::SlotMajor ? 1 : block_size;
}

struct DeviceKvLayer {
  void* k = nullptr;
  void* v = nullptr;
  KvDtype dtype = KvDtype::Bf16;
  float* k_scale = nullptr;  // FP8 only: [n_head_kv] (per-head) or [1] (per-tensor), on the device
  float* v_scale = nullptr;
  int scale_head_stride = 0;
  KvLayout layout = KvLayout::SlotMajor;
  int block_size = 0;  // tokens a block (HeadMajor needs it to find a row from a slot)
};

// The attention launchers' check (who: "paged_decode_attention: " etc.): a cache that gives its
// block_size must agree with the block table's, whose units place every row.
inline void check_kv_block_size(const char* who, const DeviceKvLayer& kv, int block_size) {
  if (kv.block_size != 0 && kv.block_size != block_size)
    kernel_fail(who, "kv.block_size (the cache's, ", kv.block_size, ") and block_size (the block table's, ", block_size,
                ") must agree (kv.block_size 0 = not given)");
}

inline int kv_element_bytes(KvDtype dtype) { return dtype == KvDtype::Bf16 ? 2 : 1; }

}  // namespace latentserve::cuda
