#include "backend/cuda/cuda_kv_cache.h"

#include <atomic>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/random_fill.h"
#include "core/error.h"

namespace latentserve::cuda {
namespace {

uint64_t next_cache_id() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

KvDtype device_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32:  // "auto": bf16 on the GPU
    case DType::BF16: return KvDtype::Bf16;
    case DType::F8_E4M3: return KvDtype::Fp8E4M3;
    default: fail("the CUDA KV cache holds bf16 or fp8_e4m3, not {}", dtype_name(dtype));
  }
}

void check_supported(const AttentionSpec& spec, const cpu::KvCacheOptions& options) {
  if (spec.kind == AttentionKind::MLA)
    fail("the CUDA backend has no MLA (latent) KV cache yet: run DeepSeek models with --device cpu");
  if (spec.head_dim_qk != spec.head_dim_v)
    fail("the CUDA KV cache needs head_dim_qk == head_dim_v, found {} and {}", spec.head_dim_qk, spec.head_dim_v);
  if (options.dtype == DType::F8_E4M3 && options.scale == cpu::KvScaleGranularity::PerBlock)
    fail("--kv-scale per-block is not implemented on cuda (FP8 scales there are static): use per-head or per-tensor");
  if (options.dtype == DType::F8_E4M3 && !(options.static_scale_headroom >= 1.0f))
    fail("FP8 static scale headroom must be >= 1, found {}", options.static_scale_headroom);
}

}  // namespace

KvLayout default_kv_layout() {
  const char* name = std::getenv("LATENTSERVE_CUDA_KV_LAYOUT");
  if (name == nullptr || *name == 0) return KvLayout::HeadMajor;
  const std::string_view v(name);
  if (v == "slot") return KvLayout::SlotMajor;
  if (v == "head") return KvLayout::HeadMajor;
  fail("LATENTSERVE_CUDA_KV_LAYOUT must be 'slot' or 'head', found '{}'", v);
}

CudaKvCache::CudaKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens,
                         const cpu::KvCacheOptions& options, cudaStream_t stream)
    : n_layer_(n_layer),
      n_blocks_(n_blocks),
      block_size_tokens_(block_size_tokens),
      n_head_kv_(spec.n_head_kv),
      head_dim_(spec.head_dim_qk),
      dtype_(device_dtype(options.dtype)),
      layout_(default_kv_layout()),
      headroom_(options.static_scale_headroom),
      id_(next_cache_id()),
      stream_(stream) {
  check_supported(spec, options);
  if (n_layer <= 0 || n_blocks <= 0 || block_size_tokens <= 0)
    fail("CUDA KV cache: n_layer, n_blocks and block_size must be positive, found {}, {}, {}", n_layer, n_blocks,
         block_size_tokens);
  rows_ = DeviceBuffer(size_t(n_layer_ * 2 * side_bytes()));
  if (dtype_ == KvDtype::Fp8E4M3) {
    const bool per_head = options.scale == cpu::KvScaleGranularity::PerHead;
    scale_head_stride_ = per_head ? 1 : 0;
    n_scales_ = per_head ? n_head_kv_ : 1;
    scales_ = DeviceBuffer(size_t(n_layer_ * 2 * n_scales_) * sizeof(float));
    LS_CUDA_CHECK(cudaMemsetAsync(scales_.data(), 0, scales_.bytes(), stream_));  // 0 = not calibrated yet
  }
}

int64_t CudaKvCache::block_bytes(const AttentionSpec& spec, int64_t n_layer, int64_t block_size_tokens,
                                 const cpu::KvCacheOptions& options) {
  check_supported(spec, options);
  const int64_t element = kv_element_bytes(device_dtype(options.dtype));
  return n_layer * 2 * block_size_tokens * spec.n_head_kv * spec.head_dim_qk * element;
}

int64_t CudaKvCache::side_bytes() const {
  return n_blocks_ * block_size_tokens_ * n_head_kv_ * head_dim_ * kv_element_bytes(dtype_);
}

DeviceKvLayer CudaKvCache::layer(int64_t l) const {
  if (l < 0 || l >= n_layer_) fail("CUDA KV cache: layer {} is outside [0, {})", l, n_layer_);
  DeviceKvLayer out;
  char* base = rows_.as<char>() + size_t(l * 2 * side_bytes());
  out.k = base;
  out.v = base + side_bytes();
  out.dtype = dtype_;
  out.layout = layout_;
  out.block_size = int(block_size_tokens_);
  if (dtype_ == KvDtype::Fp8E4M3) {
    out.k_scale = scales_.as<float>() + l * 2 * n_scales_;
    out.v_scale = out.k_scale + n_scales_;
    out.scale_head_stride = scale_head_stride_;
  }
  return out;
}

void CudaKvCache::copy_block(int64_t src_block, int64_t dst_block) {
  if (src_block < 0 || src_block >= n_blocks_ || dst_block < 0 || dst_block >= n_blocks_)
    fail("CUDA KV cache: copy_block({}, {}) outside [0, {})", src_block, dst_block, n_blocks_);
  const size_t block = size_t(block_size_tokens_ * n_head_kv_ * head_dim_ * kv_element_bytes(dtype_));
  for (int64_t l = 0; l < n_layer_; ++l) {
    const DeviceKvLayer d = layer(l);
    for (void* side : {d.k, d.v}) {
      char* p = static_cast<char*>(side);
      LS_CUDA_CHECK(cudaMemcpyAsync(p + size_t(dst_block) * block, p + size_t(src_block) * block, block,
                                    cudaMemcpyDeviceToDevice, stream_));
    }
  }
}

void CudaKvCache::fill_random(uint64_t seed) {
  const int64_t n = int64_t(rows_.bytes()) / kv_element_bytes(dtype_);
  if (dtype_ == KvDtype::Bf16) {
    fill_uniform_bf16(rows_.data(), n, 0.0f, 1.0f, seed, stream_);
  } else {
    fill_uniform_fp8_e4m3(rows_.data(), n, 64.0f, seed, stream_);
    const std::vector<float> scales(scales_.bytes() / sizeof(float), 1.0f / 64.0f);
    LS_CUDA_CHECK(cudaMemcpyAsync(scales_.data(), scales.data(), scales_.bytes(), cudaMemcpyHostToDevice, stream_));
    LS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `scales` is a host temporary
    calibrated_ = true;
  }
}

CudaKvCache& as_cuda_kv_cache(KvCacheMemory& kv) {
  if (auto* c = dynamic_cast<CudaKvCache*>(&kv)) return *c;
  fail("this model computes on cuda but was handed a KV cache on {}", kv.device());
}

}  // namespace latentserve::cuda
