#include "backend/cpu/cpu_kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/error.h"
#include "core/fp8.h"

namespace latentserve::cpu {

DType parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto" || name == "f32" || name == "float32") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp8_e4m3" || name == "fp8") return DType::F8_E4M3;
  fail("--kv-cache-dtype: expected auto, f32, bf16 or fp8_e4m3, got '{}'", name);
}

KvScaleGranularity parse_kv_scale_granularity(std::string_view name) {
  if (name == "per-tensor") return KvScaleGranularity::PerTensor;
  if (name == "per-head") return KvScaleGranularity::PerHead;
  if (name == "per-block") return KvScaleGranularity::PerBlock;
  fail("--kv-scale: expected per-tensor, per-head or per-block, got '{}'", name);
}

std::string_view kv_cache_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F8_E4M3: return "fp8_e4m3";
    default: return dtype_name(dtype);
  }
}

std::string_view kv_scale_granularity_name(KvScaleGranularity scale) {
  switch (scale) {
    case KvScaleGranularity::PerTensor: return "per-tensor";
    case KvScaleGranularity::PerHead: return "per-head";
    case KvScaleGranularity::PerBlock: return "per-block";
  }
  return "?";
}

CpuKvCache::CpuKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens,
                       const KvCacheOptions& options)
    : options_(options), n_layer_(n_layer), n_blocks_(n_blocks), block_size_tokens_(block_size_tokens) {
  const DType dt = options.dtype;
  if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F8_E4M3)
    fail("KV cache dtype: expected F32, BF16 or F8_E4M3, got {}", dtype_name(dt));
  if (!(options.static_scale_headroom >= 1.0f))
    fail("KV cache static_scale_headroom: expected >= 1, got {}", options.static_scale_headroom);
  if (options.mla_scale_tile_elements <= 0)
    fail("KV cache mla_scale_tile_elements: expected > 0, got {}", options.mla_scale_tile_elements);
  if (spec.kind == AttentionKind::MLA) {
    const int64_t r = spec.kv_lora_rank, dr = spec.qk_rope_head_dim;
    const int64_t tile = r % options.mla_scale_tile_elements == 0 ? options.mla_scale_tile_elements : r;
    init_side(k_, r + dr, options.mla_rope_bf16 ? r : r + dr, tile);  // k_pe, when fp8, is a group of its own
    init_side(v_, 0, 0, 1);
  } else {
    init_side(k_, spec.n_head_kv * spec.head_dim_qk, spec.n_head_kv * spec.head_dim_qk, spec.head_dim_qk);
    init_side(v_, spec.n_head_kv * spec.head_dim_v, spec.n_head_kv * spec.head_dim_v, spec.head_dim_v);
  }
  need_.assign(size_t(std::max(k_.n_scales, v_.n_scales)), -1.0f);
}

void CpuKvCache::init_side(Side& s, int64_t row_elements, int64_t fp8_elements, int64_t group_elements) {
  const bool fp8 = options_.dtype == DType::F8_E4M3;
  s.row_elements = row_elements;
  s.fp8_elements = fp8 ? fp8_elements : 0;
  s.row_bytes = kv_row_bytes(options_.dtype, row_elements, s.fp8_elements);
  s.group_elements = group_elements;
  if (fp8 && row_elements > 0) {
    s.n_groups = (s.fp8_elements + group_elements - 1) / group_elements;
    switch (options_.scale) {
      case KvScaleGranularity::PerTensor: s.n_scales = 1; break;
      case KvScaleGranularity::PerHead:
        s.n_scales = s.n_groups;
        s.scale_group_stride = 1;
        break;
      case KvScaleGranularity::PerBlock:
        s.n_scales = n_blocks_ * s.n_groups;
        s.scale_block_stride = s.n_groups;
        s.scale_group_stride = 1;
        break;
    }
  }
  const int64_t slot_bytes = n_blocks_ * block_size_tokens_ * s.row_bytes;
  s.rows.resize(size_t(n_layer_));
  s.scales.resize(size_t(n_layer_));
  for (int64_t l = 0; l < n_layer_; ++l) {
    s.rows[size_t(l)].assign(size_t((slot_bytes + 3) / 4), 0.0f);
    s.scales[size_t(l)].assign(size_t(s.n_scales), 0.0f);
  }
  bytes_ += n_layer_ * (slot_bytes + s.n_scales * 4);
}

double CpuKvCache::bytes_per_token() const {
  double per_layer = double(k_.row_bytes + v_.row_bytes);
  if (options_.scale == KvScaleGranularity::PerBlock)
    per_layer += double(k_.n_groups + v_.n_groups) * 4.0 / double(block_size_tokens_);
  return per_layer * double(n_layer_);
}

KvRows CpuKvCache::rows_of(const Side& s, int64_t layer) const {
  KvRows r;
  if (s.row_elements == 0) return r;
  r.data = s.rows[size_t(layer)].data();
  r.row_bytes = s.row_bytes;
  r.row_elements = s.row_elements;
  r.block_size_tokens = block_size_tokens_;
  r.dtype = options_.dtype;
  r.fp8_elements = s.fp8_elements;
  r.scales = s.scales[size_t(layer)].data();
  r.scale_block_stride = s.scale_block_stride;
  r.scale_group_stride = s.scale_group_stride;
  r.scale_group_elements = s.group_elements;
  return r;
}

KvRows CpuKvCache::k_rows(int64_t layer) const { return rows_of(k_, layer); }
KvRows CpuKvCache::v_rows(int64_t layer) const { return rows_of(v_, layer); }

float* CpuKvCache::k(int64_t layer) {
  if (options_.dtype != DType::F32)
    fail("CpuKvCache::k: the cache holds {}, not f32 rows", kv_cache_dtype_name(dtype()));
  return k_.rows[size_t(layer)].data();
}

float* CpuKvCache::v(int64_t layer) {
  if (options_.dtype != DType::F32)
    fail("CpuKvCache::v: the cache holds {}, not f32 rows", kv_cache_dtype_name(dtype()));
  return v_.row_elements == 0 ? nullptr : v_.rows[size_t(layer)].data();
}

void CpuKvCache::write(int64_t layer, const float* k, int64_t k_token_stride, const float* v, int64_t v_token_stride,
                       const int64_t* slot_mapping, int64_t n_tokens) {
  assert(layer >= 0 && layer < n_layer_);
  assert(v != nullptr || v_.row_elements == 0);
  write_side(k_, layer, k, k_token_stride, slot_mapping, n_tokens);
  if (v_.row_elements > 0) write_side(v_, layer, v, v_token_stride, slot_mapping, n_tokens);
}

void CpuKvCache::write_side(Side& s, int64_t layer, const float* x, int64_t token_stride, const int64_t* slot_mapping,
                            int64_t n_tokens) {
  unsigned char* base = reinterpret_cast<unsigned char*>(s.rows[size_t(layer)].data());
  const int64_t n = s.row_elements;
  switch (options_.dtype) {
    case DType::F32:
      for (int64_t t = 0; t < n_tokens; ++t)
        if (slot_mapping[t] >= 0)
          std::memcpy(base + slot_mapping[t] * s.row_bytes, x + t * token_stride, size_t(n) * 4);
      return;
    case DType::BF16:
      for (int64_t t = 0; t < n_tokens; ++t) {
        if (slot_mapping[t] < 0) continue;
        unsigned char* dst = base + slot_mapping[t] * s.row_bytes;
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t b = f32_to_bf16_saturating(x[t * token_stride + i]);
          std::memcpy(dst + 2 * i, &b, 2);
        }
      }
      return;
    default: write_fp8(s, layer, x, token_stride, slot_mapping, n_tokens);
  }
}

void CpuKvCache::write_fp8(Side& s, int64_t layer, const float* x, int64_t token_stride, const int64_t* slot_mapping,
                           int64_t n_tokens) {
  unsigned char* base = reinterpret_cast<unsigned char*>(s.rows[size_t(layer)].data());
  float* scales = s.scales[size_t(layer)].data();
  const int64_t bs = block_size_tokens_, ge = s.group_elements, fp8_n = s.fp8_elements;
  const bool per_block = options_.scale == KvScaleGranularity::PerBlock;
  auto group_width = [&](int64_t g) { return std::min(ge, fp8_n - g * ge); };
  auto scale_index = [&](int64_t block, int64_t g) { return block * s.scale_block_stride + g * s.scale_group_stride; };

  // 0. A sequence that writes a block's offset 0 starts filling it: drop an earlier owner's scales.
  if (per_block)
    for (int64_t t = 0; t < n_tokens; ++t)
      if (slot_mapping[t] >= 0 && slot_mapping[t] % bs == 0)
        std::fill_n(scales + scale_index(slot_mapping[t] / bs, 0), s.n_groups, 0.0f);
  // 1. The largest magnitude each touched scale must cover in this write.
  touched_.clear();
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;
    const int64_t block = slot_mapping[t] / bs;
    for (int64_t g = 0; g < s.n_groups; ++g) {
      const float a = fp8_amax(x + t * token_stride + g * ge, group_width(g));
      float& need = need_[size_t(scale_index(block, g))];
      if (need < 0.0f) touched_.push_back(scale_index(block, g));
      need = std::max(need, a);
    }
  }
  // 2. Set unset scales; per-block grows a scale that is too small and re-scales its earlier codes.
  for (int64_t idx : touched_) {
    const float a = need_[size_t(idx)];
    need_[size_t(idx)] = -1.0f;
    const float old = scales[idx];
    if (per_block) {
      if (a > old * kFp8E4M3Max) {
        const float fresh = fp8_pow2_scale(a, 1.0f);
        if (old > 0.0f) rescale_block_group(s, layer, idx / s.n_groups, idx % s.n_groups, old, fresh);
        scales[idx] = fresh;
      }
    } else if (old == 0.0f && a > 0.0f) {
      scales[idx] = fp8_pow2_scale(a, options_.static_scale_headroom);
    }
  }
  // 3. Encode the rows.
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    unsigned char* dst = base + slot * s.row_bytes;
    const float* src = x + t * token_stride;
    for (int64_t g = 0; g < s.n_groups; ++g)
      stats_.saturated_elements +=
          quantize_fp8(src + g * ge, group_width(g), scales[scale_index(slot / bs, g)], dst + g * ge);
    for (int64_t i = fp8_n; i < s.row_elements; ++i) {  // bf16 tail (MLA k_pe)
      const uint16_t b = f32_to_bf16_saturating(src[i]);
      std::memcpy(dst + fp8_n + 2 * (i - fp8_n), &b, 2);
    }
  }
}

void CpuKvCache::rescale_block_group(Side& s, int64_t layer, int64_t block, int64_t group, float old_scale,
                                     float new_scale) {
  unsigned char* base = reinterpret_cast<unsigned char*>(s.rows[size_t(layer)].data());
  const float ratio = old_scale / new_scale;  // a power of two < 1: exact
  const float* table = fp8_e4m3_table();
  const int64_t begin = group * s.group_elements, end = std::min(begin + s.group_elements, s.fp8_elements);
  for (int64_t slot = block * block_size_tokens_; slot < (block + 1) * block_size_tokens_; ++slot) {
    unsigned char* codes = base + slot * s.row_bytes;
    for (int64_t i = begin; i < end; ++i) codes[i] = f32_to_fp8_e4m3(table[codes[i]] * ratio);
  }
  ++stats_.rescaled_block_groups;
  stats_.rescaled_elements += block_size_tokens_ * (end - begin);
}

void CpuKvCache::copy_block(int64_t src_block, int64_t dst_block) {
  if (src_block < 0 || src_block >= n_blocks_ || dst_block < 0 || dst_block >= n_blocks_)
    fail("copy_block: blocks {} -> {} outside [0, {})", src_block, dst_block, n_blocks_);
  for (Side* s : {&k_, &v_}) {
    if (s->row_elements == 0) continue;
    const int64_t block_bytes = block_size_tokens_ * s->row_bytes;
    for (int64_t l = 0; l < n_layer_; ++l) {
      unsigned char* base = reinterpret_cast<unsigned char*>(s->rows[size_t(l)].data());
      std::memmove(base + dst_block * block_bytes, base + src_block * block_bytes, size_t(block_bytes));
      if (s->scale_block_stride > 0) {
        float* scales = s->scales[size_t(l)].data();
        std::copy_n(scales + src_block * s->scale_block_stride, s->n_groups,
                    scales + dst_block * s->scale_block_stride);
      }
    }
  }
}

CpuKvCache& as_cpu_kv_cache(KvCacheMemory& kv) {
  auto* cpu = dynamic_cast<CpuKvCache*>(&kv);
  if (!cpu) fail("a CPU model was handed a KV cache on '{}' (expected the CPU cache it makes)", kv.device());
  return *cpu;
}

}  // namespace latentserve::cpu
