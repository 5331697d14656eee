#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a) for bf16 with f32 accumulators, and the shared-memory
// layout it reads: tiles of rows of 64 bf16 (128 bytes) in the 128-byte swizzle.
//
// Layout of an operand tile of R rows x 128 bf16 ("two halves"): element (r, d) sits at byte
//   (d / 64) * (R * 128) + r * 128 + ((((d % 64) / 8) ^ (r % 8)) * 16) + (d % 8) * 2
// with the tile base 1024-byte aligned: each 8-row group of a half is one 1024-byte swizzle
// atom (the hardware XORs address bits [4:6] with [7:9]), so a 16-byte cp.async lands whole
// and the 8 rows a core matrix needs sit in 8 different bank groups.
//
// Descriptors (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13, leading
// byte offset >> 4 in bits 16-29, stride byte offset >> 4 in bits 32-45, base offset 0 (atoms
// 1024-aligned), swizzle mode in bits 62-63 (1 = 128-byte).
//  - K-major (the k index runs along the 128-byte rows: Q and K in S = Q K^T): stride byte
//    offset = 1024 (one 8-row group to the next); leading byte offset unused (1). The k16 step
//    kk of a half starts 32 * kk bytes into its rows; the second half R * 128 bytes on.
//  - MN-major (B = V in O = P V, keys along rows, head dims along the 128 bytes; trans-b = 1):
//    leading byte offset = the stride from dims 0-63 to 64-127 (R * 128), stride byte offset =
//    1024 (8 keys to the next 8); the k16 step over keys 16 kk.. starts 16 * 128 * kk bytes on.
// Register fragments (PTX ISA, "Register Fragments"): warp w of the warpgroup owns rows
// 16 w .. 16 w + 15 of the m64 tile; per n8 column block j a lane holds d[4j + 0..1] at
// (row lane / 4, columns 8 j + 2 (lane % 4) + 0..1) and d[4j + 2..3] at row lane / 4 + 8: the
// mma.sync m16n8 C layout per warp. The A fragment of a k16 step in registers is the
// mma.sync m16n8k16 A layout, so two n8 blocks of an S accumulator, packed to bf16, are the A
// operand of one k16 step of P V.
#include <cstdint>

namespace latentserve::cuda::wgmma {

__device__ __forceinline__ uint64_t descriptor(uint32_t smem_addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((smem_addr & 0x3FFFFu) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}
// K-major operand (rows = M or N, 128-byte rows along k), starting at its first row and k16 step.
__device__ __forceinline__ uint64_t k_major(uint32_t smem_addr) { return descriptor(smem_addr, 16, 1024); }
// MN-major B operand (rows = k, 128-byte rows along n), halves half_bytes apart.
__device__ __forceinline__ uint64_t mn_major(uint32_t smem_addr, uint32_t half_bytes) {
  return descriptor(smem_addr, half_bytes, 1024);
}

// Byte offset of 16-byte chunk `chunk` (0..15: dims 8 chunk .. 8 chunk + 7) of row `row` in a
// tile of `rows` rows laid out as above.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk, int rows) {
  return uint32_t((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Orders this thread's register (and generic-proxy shared memory) writes before the
// warpgroup's next wgmma reads them.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins the compiler's view of accumulator registers at this point (after a wait): no access to
// them moves above it, onto registers an in-flight wgmma still owns.
template <int N>
__device__ __forceinline__ void fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared memory written through the generic proxy (st.shared, cp.async) must be fenced
// before the async proxy (wgmma) reads it; then a barrier.
__device__ __forceinline__ void fence_generic_to_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The 64 f32 accumulator registers of an m64n128 wgmma: their placeholders (%0 .. %63, the
// asm's first 64 operands) and the operand list.
#define LS_WGMMA_D64_REGS                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define LS_WGMMA_D64_OPERANDS(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),            \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),          \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),          \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),          \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),          \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),          \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),          \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d[64 x 128] (+)= a[64 x 16] b[16 x 128]: A and B K-major in shared memory. accumulate = 0
// overwrites d.
__device__ __forceinline__ void m64n128k16_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      LS_WGMMA_D64_REGS
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : LS_WGMMA_D64_OPERANDS(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// d[64 x 64] (+)= a[64 x 16] b[16 x 64]: A and B K-major in shared memory.
__device__ __forceinline__ void m64n64k16_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31}"
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}

// Either of the two above, by N (the S tile's key count).
template <int N>
__device__ __forceinline__ void m64nNk16_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (N == 128)
    m64n128k16_ss(d, a, b, accumulate);
  else
    m64n64k16_ss(d, a, b, accumulate);
}

// d[64 x 128] (+)= a[64 x 16] b[16 x 128]: A in registers (bf16x2, the fragment layout above), B
// MN-major in shared memory (trans-b = 1).
__device__ __forceinline__ void m64n128k16_rs_bt(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      LS_WGMMA_D64_REGS
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : LS_WGMMA_D64_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

}  // namespace latentserve::cuda::wgmma

#undef LS_WGMMA_D64_REGS
#undef LS_WGMMA_D64_OPERANDS
