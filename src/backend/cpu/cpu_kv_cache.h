#pragma once
// The memory behind the KV block ids on the CPU, per layer, slot-major
// ([n_blocks * block_size] slots, one row per slot):
//   standard attention: K rows of n_head_kv * head_dim_qk and V rows of n_head_kv * head_dim_v;
//   MLA: one latent row of kv_lora_rank + qk_rope_head_dim ([c_kv | k_pe]), no V.
// kv/ decides which slots a token uses; this only owns the bytes (and the FP8 scales, which
// live beside the blocks).
//
// Element type (KvCacheOptions::dtype, chosen at construction): F32, BF16 or F8_E4M3; the
// row formats and the scale layout are in backend/cpu/kv_quant.h. Models store rows with
// write() (which quantises) and hand k_rows()/v_rows() to the attention kernel (which
// dequantises each row as it reads it). How FP8 scales are set (docs/kv-fp8.md says why):
//
//   per-block   Set by the rows written into a block: each group's scale is the smallest power
//               of two that holds the largest |x| written so far at <= 448. When a later row
//               exceeds it, the scale grows (to a power of two again) and the block's earlier
//               codes of that group are re-scaled once per write() call — at most
//               block_size rows, exact except where a value drops into e4m3's subnormals.
//               Nothing saturates. A write at a block's offset 0 starts the block afresh
//               (its scales of an earlier owner are dropped): the cache assumes, as the
//               engine guarantees, that a sequence writes its slots in position order.
//   per-tensor, Static: calibrated from the first write() that holds a non-zero value of the
//   per-head    scale's group (usually the first prompt), with static_scale_headroom (the
//               scale is the power of two at or above amax * headroom / 448) and fixed after;
//               later values beyond 448 * scale saturate to ±448 * scale (counted in stats()).
//               Headroom is cheap in a floating-point format: it only moves the subnormal
//               threshold, not the relative precision of normal values.
#include <cstdint>
#include <string_view>
#include <vector>

#include "attention/attention_spec.h"
#include "backend/cpu/kv_quant.h"
#include "backend/kv_cache_memory.h"

namespace latentserve::cpu {

enum class KvScaleGranularity { PerTensor, PerHead, PerBlock };

struct KvCacheOptions {
  DType dtype = DType::F32;  // F32 ("auto" on the CPU), BF16 or F8_E4M3
  // FP8 only:
  KvScaleGranularity scale = KvScaleGranularity::PerBlock;
  bool mla_rope_bf16 = true;              // MLA: keep k_pe (the last qk_rope_head_dim) in bf16, as FlashMLA does
  int64_t mla_scale_tile_elements = 128;  // MLA: c_kv is cut into scale groups of this many (FlashMLA: 128);
                                          // kv_lora_rank itself when it is not a multiple
  float static_scale_headroom = 4.0f;     // per-tensor / per-head calibration headroom (>= 1)
};

// Command-line spellings: --kv-cache-dtype auto|f32|bf16|fp8_e4m3 (fp8 = fp8_e4m3; auto = f32
// on the CPU) and --kv-scale per-tensor|per-head|per-block. Unknown values throw Error.
DType parse_kv_cache_dtype(std::string_view name);
KvScaleGranularity parse_kv_scale_granularity(std::string_view name);
std::string_view kv_cache_dtype_name(DType dtype);  // "f32", "bf16", "fp8_e4m3"
std::string_view kv_scale_granularity_name(KvScaleGranularity scale);

struct KvQuantStats {
  int64_t saturated_elements = 0;     // FP8 values clamped to ±448 * scale (static scales only)
  int64_t rescaled_block_groups = 0;  // per-block: (block, group) scales that grew over earlier rows
  int64_t rescaled_elements = 0;      // codes re-scaled by those
};

class CpuKvCache final : public KvCacheMemory {
 public:
  CpuKvCache(const AttentionSpec& spec, int64_t n_layer, int64_t n_blocks, int64_t block_size_tokens,
             const KvCacheOptions& options = {});

  // Stores token t's rows into slot slot_mapping[t] (< 0: padding, not written), t < n_tokens,
  // converting to the cache's dtype. k: [n_tokens] rows of k_row_elements() floats,
  // k_token_stride apart; v likewise (MLA: v = nullptr).
  void write(int64_t layer, const float* k, int64_t k_token_stride, const float* v, int64_t v_token_stride,
             const int64_t* slot_mapping, int64_t n_tokens);
  // What the attention kernel reads (MLA: k_rows is the latent; v_rows has data == nullptr).
  KvRows k_rows(int64_t layer) const;
  KvRows v_rows(int64_t layer) const;
  // Copies block src's rows and per-block scales to block dst in every layer (copy on write).
  void copy_block(int64_t src_block, int64_t dst_block) override;
  std::string_view device() const override { return "cpu"; }

  // The raw f32 rows of an F32 cache (throws Error for BF16 / F8_E4M3). MLA: v() is nullptr.
  float* k(int64_t layer);
  float* v(int64_t layer);

  DType dtype() const { return options_.dtype; }
  const KvCacheOptions& options() const { return options_; }
  int64_t k_row_elements() const { return k_.row_elements; }
  int64_t v_row_elements() const { return v_.row_elements; }
  int64_t n_layer() const { return n_layer_; }
  int64_t n_blocks() const override { return n_blocks_; }
  int64_t block_size_tokens() const { return block_size_tokens_; }
  int64_t bytes() const override { return bytes_; }  // rows and scales, all layers
  double bytes_per_token() const;           // rows of all layers, plus per-block scales amortised
  const KvQuantStats& stats() const { return stats_; }

 private:
  struct Side {  // the K (or latent) rows, or the V rows
    int64_t row_elements = 0, row_bytes = 0, fp8_elements = 0;
    int64_t group_elements = 1, n_groups = 0, n_scales = 0, scale_block_stride = 0, scale_group_stride = 0;
    std::vector<std::vector<float>> rows;    // [layer] -> n_slots * row_bytes bytes (float storage for alignment)
    std::vector<std::vector<float>> scales;  // [layer] -> n_scales (FP8 only)
  };
  void init_side(Side& side, int64_t row_elements, int64_t fp8_elements, int64_t group_elements);
  KvRows rows_of(const Side& side, int64_t layer) const;
  void write_side(Side& side, int64_t layer, const float* x, int64_t token_stride, const int64_t* slot_mapping,
                  int64_t n_tokens);
  void write_fp8(Side& side, int64_t layer, const float* x, int64_t token_stride, const int64_t* slot_mapping,
                 int64_t n_tokens);
  void rescale_block_group(Side& side, int64_t layer, int64_t block, int64_t group, float old_scale, float new_scale);

  KvCacheOptions options_;
  int64_t n_layer_, n_blocks_, block_size_tokens_, bytes_ = 0;
  Side k_, v_;
  KvQuantStats stats_;
  std::vector<float> need_;       // scratch: per scale index, the largest |x| of this write (-1: untouched)
  std::vector<int64_t> touched_;  // scratch: the scale indices this write touched
};

// The CPU cache behind a KvCacheMemory; an Error when the cache lives elsewhere.
CpuKvCache& as_cpu_kv_cache(KvCacheMemory& kv);

}  // namespace latentserve::cpu
