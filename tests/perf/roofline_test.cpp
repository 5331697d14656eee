// Roofline arithmetic against the analysis' figures: the weight-streaming time of a
// 70B model on an H100, the ridge points, and prefill's quadratic attention term.
#include <gtest/gtest.h>

#include "core/error.h"
#include "perf/presets.h"
#include "perf/roofline.h"

namespace latentserve::perf {
namespace {

TEST(Roofline, SeventyBillionFp16WeightsOnH100) {
  // 70e9 params x 2 B = 140 GB; / 3.35e12 B/s (H100 SXM HBM3) = 41.79 ms.
  const StepCost c = roofline(140e9, 0, 0, gpu_spec("h100"));
  EXPECT_NEAR(c.time_ms, 41.8, 0.05);
  EXPECT_EQ(c.dominant_term(), "weights");
}

TEST(Roofline, RidgePoints) {
  // A100: 312e12 FLOP/s / 2.039e12 B/s = 153.0; H100: 989.4e12 / 3.35e12 = 295.3;
  // H200: 989.4e12 / 4.8e12 = 206.1.
  EXPECT_NEAR(gpu_spec("a100").ridge_flop_per_byte(), 153, 1);
  EXPECT_NEAR(gpu_spec("h100").ridge_flop_per_byte(), 295, 1);
  EXPECT_NEAR(gpu_spec("h200").ridge_flop_per_byte(), 206, 1);
}

TEST(Roofline, UnknownGpuNamesTheFlag) {
  try {
    gpu_spec("v100");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu"), std::string::npos);
  }
}

TEST(Roofline, TakesTheLargerOfMemoryAndCompute) {
  const HardwareSpec h100 = gpu_spec("h100");
  // 1 GB and 1e15 FLOP: 0.2985 ms of memory, 1.0107 s of compute.
  const StepCost c = roofline(1e9, 0, 1e15, h100);
  EXPECT_NEAR(c.memory_ms, 0.2985, 1e-3);
  EXPECT_NEAR(c.compute_ms, 1010.7, 0.1);
  EXPECT_DOUBLE_EQ(c.time_ms, c.compute_ms);
  EXPECT_EQ(c.dominant_term(), "compute");
  EXPECT_EQ(roofline(1e9, 2e9, 0, h100).dominant_term(), "kv");
}

TEST(Roofline, MlaDecodeAttentionIntensity) {
  // Absorbed MLA decode, per context token per layer: 128 heads x 2 x (512 + 64 + 512) FLOP
  // = 278,528 FLOP against 576 x 2 B = 1152 B read: 241.8 FLOP/byte, past H200's ridge (206)
  // and short of H100's (295). GQA-8 of the 70B: 2 x 64 x 256 = 32,768 FLOP per 4096 B = 8.
  const AttentionSpec mla = model_preset("deepseek-v2").attention;
  EXPECT_DOUBLE_EQ(decode_attention_flops_per_context_token(mla), 278528);
  EXPECT_NEAR(decode_attention_flops_per_context_token(mla) / 1152, 241.8, 0.1);
  EXPECT_DOUBLE_EQ(decode_attention_flops_per_context_token(AttentionSpec::standard(64, 8, 128, 128)) / 4096, 8);
}

TEST(Roofline, PrefillHasTheQuadraticAttentionTerm) {
  // Llama 3 8B, L = 8192: causal attention n_layer x n_head x (d_k + d_v) x L x (L + 1)
  // = 32 x 32 x 256 x 8192 x 8193 = 1.7595e13 FLOP on top of 2 x params x L.
  const ModelShape m = model_preset("llama3-8b");
  const HardwareSpec h100 = gpu_spec("h100");
  const TpKvLayout tp1 = tp_kv_layout(m.attention, m.n_layer, DType::BF16, 1);
  const double linear = 2.0 * double(count_params(m).active_per_token);
  const StepCost p = prefill(m, h100, 8192, tp1);
  EXPECT_NEAR((p.flops - linear * 8192) / 1.7595e13, 1.0, 1e-4);
  // Doubling L more than doubles the attention part (x 4) while the matmuls double.
  const StepCost p2 = prefill(m, h100, 16384, tp1);
  EXPECT_NEAR((p2.flops - linear * 16384) / (p.flops - linear * 8192), 4.0, 1e-3);
  EXPECT_EQ(p.dominant_term(), "compute");
}

}  // namespace
}  // namespace latentserve::perf
