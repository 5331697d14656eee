#include "backend/cuda/embedding.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/pdl_launch.cuh"

namespace latentserve::cuda {
namespace {

constexpr int kThreads = 256;

// grid: n_tokens. kVec: 8 elements per step (one uint4 of bf16 in, two float4 out).
template <bool kVec>
__global__ void __launch_bounds__(kThreads) embedding_kernel(const __nv_bfloat16* table, const int32_t* ids,
                                                             float* residual, int dim, int vocab, int* bad) {
  const int32_t id = ids[blockIdx.x];
  const bool ok = id >= 0 && id < vocab;
  if (!ok && bad && threadIdx.x == 0) *bad = 1;
  const __nv_bfloat16* row = table + int64_t(ok ? id : 0) * dim;
  float* out = residual + int64_t(blockIdx.x) * dim;
  if constexpr (kVec) {
    const uint4* src = reinterpret_cast<const uint4*>(row);
    float4* dst = reinterpret_cast<float4*>(out);
    for (int u = threadIdx.x; u < dim / 8; u += kThreads) {
      float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (ok) bf16x8_to_f32(src[u], f);
      dst[2 * u] = make_float4(f[0], f[1], f[2], f[3]);
      dst[2 * u + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += kThreads) out[i] = ok ? bf16_to_f32(row[i]) : 0.0f;
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const __nv_bfloat16* in, const int32_t* indices,
                                                               __nv_bfloat16* out, int dim) {
  allow_dependent_launch();
  wait_for_previous_kernel();
  const int32_t index = indices[blockIdx.x];
  const __nv_bfloat16* row = in + int64_t(index < 0 ? 0 : index) * dim;
  __nv_bfloat16* o = out + int64_t(blockIdx.x) * dim;
  if constexpr (kVec) {
    const uint4* src = reinterpret_cast<const uint4*>(row);
    uint4* dst = reinterpret_cast<uint4*>(o);
    for (int u = threadIdx.x; u < dim / 8; u += kThreads) dst[u] = index < 0 ? make_uint4(0, 0, 0, 0) : src[u];
  } else {
    for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = index < 0 ? __float2bfloat16(0.0f) : row[i];
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void embedding_lookup(const void* table, const int32_t* token_ids, float* residual, int n_tokens, int dim, int vocab,
                      int* bad_token_flag, cudaStream_t s) {
  if (!table) kernel_fail("embedding_lookup: table is null (expected a device pointer to bf16 [vocab, dim])");
  if (!token_ids) kernel_fail("embedding_lookup: token_ids is null (expected a device pointer to int32 [n_tokens])");
  if (!residual) kernel_fail("embedding_lookup: residual is null (expected a device pointer to f32 [n_tokens, dim])");
  if (n_tokens < 0) kernel_fail("embedding_lookup: n_tokens must be >= 0, found ", n_tokens);
  if (dim <= 0) kernel_fail("embedding_lookup: dim must be > 0, found ", dim);
  if (vocab <= 0) kernel_fail("embedding_lookup: vocab must be > 0, found ", vocab);
  if (n_tokens == 0) return;
  auto* t = static_cast<const __nv_bfloat16*>(table);
  if (dim % 8 == 0 && aligned16(table) && aligned16(residual))
    embedding_kernel<true><<<n_tokens, kThreads, 0, s>>>(t, token_ids, residual, dim, vocab, bad_token_flag);
  else
    embedding_kernel<false><<<n_tokens, kThreads, 0, s>>>(t, token_ids, residual, dim, vocab, bad_token_flag);
  LS_CUDA_CHECK_LAUNCH("embedding_kernel");
}

void gather_rows(const void* in, const int32_t* indices, void* out, int n_out, int dim, cudaStream_t s) {
  if (!in) kernel_fail("gather_rows: in is null (expected a device pointer to bf16 [n_in, dim])");
  if (!indices) kernel_fail("gather_rows: indices is null (expected a device pointer to int32 [n_out])");
  if (!out) kernel_fail("gather_rows: out is null (expected a device pointer to bf16 [n_out, dim])");
  if (n_out < 0) kernel_fail("gather_rows: n_out must be >= 0, found ", n_out);
  if (dim <= 0) kernel_fail("gather_rows: dim must be > 0, found ", dim);
  if (n_out == 0) return;
  auto* i = static_cast<const __nv_bfloat16*>(in);
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (dim % 8 == 0 && aligned16(in) && aligned16(out))
    launch_pdl(gather_rows_kernel<true>, dim3(n_out), dim3(kThreads), 0, s, i, indices, o, dim);
  else
    launch_pdl(gather_rows_kernel<false>, dim3(n_out), dim3(kThreads), 0, s, i, indices, o, dim);
  LS_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace latentserve::cuda
