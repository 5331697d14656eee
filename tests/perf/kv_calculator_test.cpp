// The KV figures of the source analysis, reproduced by the planner's calculator.
// Each expected value is derived in a comment from the published shape, not from this code.
#include <gtest/gtest.h>

#include "core/error.h"
#include "perf/kv_calculator.h"
#include "perf/presets.h"

namespace latentserve::perf {
namespace {

constexpr double kGB = 1e9, kMB = 1e6, kGiB = 1073741824.0, kMiB = 1048576.0;

// Llama 70B shape: 80 layers, 64 query heads, head dim 128, fp16 cache, 8K context.
constexpr int64_t kLayers = 80, kCtx = 8192;
AttentionSpec llama70b(int64_t n_kv) { return AttentionSpec::standard(64, n_kv, 128, 128); }

TEST(KvCalculator, Llama70bMhaGqaMqaAt8kOneSequence) {
  // MHA: 2 (K,V) x 80 layers x 64 heads x 128 dims x 2 bytes = 2,621,440 B/token;
  // x 8192 tokens = 21,474,836,480 B = 21.47 GB.
  EXPECT_EQ(kv_size(llama70b(64), kLayers, DType::F16, kCtx, 1).bytes_per_sequence, 21474836480);
  EXPECT_NEAR(kv_size(llama70b(64), kLayers, DType::F16, kCtx, 1).bytes_per_sequence / kGB, 21.47, 0.005);
  // GQA-8: 8 of 64 heads -> 21.47 / 8 = 2.684 GB.
  EXPECT_NEAR(kv_size(llama70b(8), kLayers, DType::F16, kCtx, 1).bytes_per_sequence / kGB, 2.68, 0.005);
  // MQA: 1 of 64 heads -> 21.47 / 64 = 0.3355 GB.
  EXPECT_NEAR(kv_size(llama70b(1), kLayers, DType::F16, kCtx, 1).bytes_per_sequence / kGB, 0.34, 0.005);
}

TEST(KvCalculator, Llama70bBatch32) {
  // 32 sequences: MHA 32 x 21.47 = 687.2 GB; GQA-8 32 x 2.684 = 85.9 GB.
  EXPECT_NEAR(kv_size(llama70b(64), kLayers, DType::F16, kCtx, 32).bytes_batch / kGB, 687, 0.5);
  EXPECT_NEAR(kv_size(llama70b(8), kLayers, DType::F16, kCtx, 32).bytes_batch / kGB, 86, 0.5);
}

TEST(KvCalculator, PerTokenPerLayer) {
  // One layer of the GQA-8 70B: 2 x 8 x 128 x 2 B = 4096 B; 80 layers: 327,680 B.
  const KvSize s = kv_size(llama70b(8), kLayers, DType::F16, kCtx, 1);
  EXPECT_EQ(s.bytes_per_token_per_layer, 4096);
  EXPECT_EQ(s.bytes_per_token, 327680);
}

TEST(KvCalculator, Gqa8AtBatch64ExceedsTheWeights) {
  // 64 x 2.684 GB = 171.8 GB of KV, more than the 70B's 140 GB of fp16 weights (70e9 x 2 B).
  const double kv = double(kv_size(llama70b(8), kLayers, DType::F16, kCtx, 64).bytes_batch);
  EXPECT_NEAR(kv / kGB, 172, 0.5);
  EXPECT_GT(kv, 140 * kGB);
}

TEST(KvCalculator, Fp8HalvesGqa8) {
  // fp8 e4m3 is 1 byte per element against 2: 2.684 GB -> 1.342 GB.
  const double bf16 = double(kv_size(llama70b(8), kLayers, DType::BF16, kCtx, 1).bytes_per_sequence);
  const double fp8 = double(kv_size(llama70b(8), kLayers, DType::F8_E4M3, kCtx, 1).bytes_per_sequence);
  EXPECT_NEAR(bf16 / kGB, 2.68, 0.005);
  EXPECT_NEAR(fp8 / kGB, 1.34, 0.005);
  EXPECT_DOUBLE_EQ(fp8 * 2, bf16);
}

TEST(KvCalculator, DeepSeekV2MlaAgainstMhaEquivalentAt8k) {
  // DeepSeek-V2: 60 layers, 128 heads, d_c (kv_lora_rank) 512, d_R (qk_rope) 64, bf16.
  const ModelShape v2 = model_preset("deepseek-v2");
  ASSERT_EQ(v2.n_layer, 60);
  ASSERT_EQ(v2.attention.n_head, 128);
  // MHA-equivalent: 2 x 60 x 128 x 128 x 2 B = 3,932,160 B/token; x 8192 = 32.21 GB = exactly 30 GiB.
  const KvSize mha = kv_size(mha_equivalent(v2.attention), v2.n_layer, DType::BF16, kCtx, 1);
  EXPECT_NEAR(mha.bytes_per_sequence / kGB, 32.2, 0.05);
  EXPECT_DOUBLE_EQ(mha.bytes_per_sequence / kGiB, 30.0);
  // MLA: (512 + 64) x 60 x 2 B = 69,120 B/token; x 8192 = 566.2 MB = exactly 540 MiB.
  const KvSize mla = kv_size(v2.attention, v2.n_layer, DType::BF16, kCtx, 1);
  EXPECT_NEAR(mla.bytes_per_sequence / kMB, 566, 0.5);
  EXPECT_DOUBLE_EQ(mla.bytes_per_sequence / kMiB, 540.0);
  // 3,932,160 / 69,120 = 56.9, "about 57x".
  EXPECT_NEAR(double(mha.bytes_per_sequence) / double(mla.bytes_per_sequence), 57, 0.2);
}

TEST(KvCalculator, MlaLatentEqualsTwoAndAQuarterGqaHeads) {
  // 576 elements / (128 K + 128 V) per standard head = 2.25 heads.
  EXPECT_DOUBLE_EQ(mla_equivalent_kv_heads(model_preset("deepseek-v3").attention), 2.25);
}

TEST(KvCalculator, Tp16On8KvHeadsReplicatesEachHeadTwice) {
  // 16 ranks, 8 KV heads: one head per rank, each head on 16 / 8 = 2 ranks.
  const TpKvLayout l = tp_kv_layout(llama70b(8), kLayers, DType::BF16, 16);
  EXPECT_EQ(l.kv_heads_per_gpu, 1);
  EXPECT_EQ(l.kv_head_replication, 2);
  EXPECT_EQ(l.query_heads_per_gpu, 4);
  EXPECT_EQ(l.bytes_per_token_per_gpu, 327680 / 8);  // one of the 8 heads
}

TEST(KvCalculator, TpSplitsKvHeadsEvenly) {
  // TP 4 on 8 KV heads: 2 heads per rank, no replication.
  const TpKvLayout l = tp_kv_layout(llama70b(8), kLayers, DType::BF16, 4);
  EXPECT_EQ(l.kv_heads_per_gpu, 2);
  EXPECT_EQ(l.kv_head_replication, 1);
  EXPECT_EQ(l.bytes_per_token_per_gpu, 327680 / 4);
}

TEST(KvCalculator, MlaLatentIsDuplicatedOnEveryTpRank) {
  const AttentionSpec mla = model_preset("deepseek-v2").attention;
  const TpKvLayout l = tp_kv_layout(mla, 60, DType::BF16, 8);
  EXPECT_TRUE(l.latent_duplicated);
  EXPECT_EQ(l.kv_head_replication, 8);
  EXPECT_EQ(l.bytes_per_token_per_gpu, 69120);  // the whole latent on each rank
  EXPECT_NE(l.note.find("data-parallel attention"), std::string::npos);
}

TEST(KvCalculator, TpErrorsNameTheFlag) {
  EXPECT_THROW(tp_kv_layout(llama70b(8), kLayers, DType::BF16, 3), Error);   // 3 does not divide 64 heads
  EXPECT_THROW(tp_kv_layout(llama70b(8), kLayers, DType::BF16, 0), Error);
  try {
    tp_kv_layout(AttentionSpec::standard(64, 16, 128, 128), 1, DType::BF16, 3);  // 3 does not divide 64 heads
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp"), std::string::npos) << e.what();
  }
  try {
    tp_kv_layout(AttentionSpec::standard(48, 6, 128, 128), 1, DType::BF16, 16);  // 16 > 6 KV heads, not a multiple
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp"), std::string::npos) << e.what();
  }
  try {
    tp_kv_layout(AttentionSpec::standard(96, 12, 128, 128), 1, DType::BF16, 32);  // 32 > 12 KV heads, not a multiple
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp"), std::string::npos) << e.what();
  }
}

TEST(KvCalculator, KvDtypeNames) {
  EXPECT_EQ(parse_kv_dtype("fp8_e4m3"), DType::F8_E4M3);
  EXPECT_EQ(parse_kv_dtype("bf16"), DType::BF16);
  try {
    parse_kv_dtype("int3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype"), std::string::npos);
  }
}

}  // namespace
}  // namespace latentserve::perf
