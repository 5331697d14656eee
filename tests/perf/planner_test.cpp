// The planner's verdicts: capacity, regime, TP layout, MLA's data-parallel alternative.
// Expected values are worked out in comments from the published shapes and datasheets.
#include <gtest/gtest.h>

#include "core/error.h"
#include "perf/planner.h"
#include "perf/presets.h"
#include "perf/sweep.h"

namespace latentserve::perf {
namespace {

Workload workload(int64_t context, int64_t batch, int64_t tp, DType kv = DType::BF16) {
  Workload w;
  w.context_tokens = context;
  w.batch = batch;
  w.tp = tp;
  w.kv_dtype = kv;
  return w;
}

TEST(Planner, Llama3_70bOnFourH100s) {
  // Weights 141.1 GB / 4 = 35.28 GB per GPU; usable 0.9 x 80 GB = 72 GB; left 36.72 GB.
  // KV per sequence per GPU at 8K: 327,680 B/token / 4 x 8192 = 671.1 MB -> 54 sequences.
  const Plan p = make_plan(model_preset("llama3-70b"), gpu_spec("h100"), workload(8192, 32, 4));
  EXPECT_NEAR(p.weight_bytes_per_gpu / 1e9, 35.28, 0.01);
  EXPECT_NEAR(p.kv_bytes_per_sequence_per_gpu / 1e6, 671.1, 0.1);
  EXPECT_EQ(p.max_concurrent_sequences, 54);
  EXPECT_TRUE(p.batch_fits);
  EXPECT_EQ(p.tp_layout.kv_heads_per_gpu, 2);
  // Per GPU the step reads the weights but the input embedding, (70.55 - 1.05) x 2 / 4 = 34.75 GB,
  // and 32 x 0.671 = 21.47 GB of KV: weight-bound, (34.75 + 21.47) GB / 3.35 TB/s = 16.78 ms.
  EXPECT_EQ(p.regime, "weight-bound");
  EXPECT_NEAR(p.decode.weight_bytes / 1e9, 34.75, 0.01);
  EXPECT_NEAR(p.decode.kv_bytes / 1e9, 21.47, 0.01);
  EXPECT_NEAR(p.decode.time_ms, 16.78, 0.01);
  // Decode intensity is far below the ridge point (295).
  EXPECT_LT(p.decode.arithmetic_intensity_flop_per_byte(), 100);
}

TEST(Planner, MhaSeventyBAtBatch32IsCapacityBound) {
  // 687 GB of KV over 8 GPUs = 85.9 GB per GPU > 72 GB usable, before any weights.
  const Plan p = make_plan(model_preset("llama-70b-mha"), gpu_spec("h100"), workload(8192, 32, 8));
  EXPECT_EQ(p.regime, "capacity-bound");
  EXPECT_FALSE(p.batch_fits);
  EXPECT_LT(p.max_concurrent_sequences, 32);
}

TEST(Planner, LongContextGqaIsKvBound) {
  // Llama 3 70B, TP 8 on H200, batch 64 at 32K: KV per GPU 64 x 327,680 x 32768 / 8 = 85.9 GB,
  // weights per GPU 17.6 GB: fits in 126.9 GB and the KV term dominates.
  const Plan p = make_plan(model_preset("llama3-70b"), gpu_spec("h200"), workload(32768, 64, 8));
  EXPECT_TRUE(p.batch_fits);
  EXPECT_EQ(p.regime, "KV-bound");
}

TEST(Planner, HugeBatchShortContextIsComputeBound) {
  // Llama 3 8B, batch 1024 at 16 tokens: 2 x 7.5e9 x 1024 = 15.4 TFLOP = 15.6 ms at 989 TFLOP/s,
  // against ~15 GB weights + 2.1 GB KV = 5.1 ms of memory.
  const Plan p = make_plan(model_preset("llama3-8b"), gpu_spec("h100"), workload(16, 1024, 1));
  EXPECT_EQ(p.regime, "compute-bound");
  EXPECT_GT(p.decode.arithmetic_intensity_flop_per_byte(), p.ridge_flop_per_byte);
}

TEST(Planner, WeightsThatDoNotFitAreCapacityBound) {
  // 141 GB of weights on one 80 GB H100.
  const Plan p = make_plan(model_preset("llama3-70b"), gpu_spec("h100"), workload(1024, 1, 1));
  EXPECT_EQ(p.regime, "capacity-bound");
  EXPECT_EQ(p.max_concurrent_sequences, 0);
}

TEST(Planner, Tp16OnEightKvHeads) {
  const Plan p = make_plan(model_preset("llama3-70b"), gpu_spec("h100"), workload(8192, 8, 16));
  EXPECT_EQ(p.tp_layout.kv_head_replication, 2);
  EXPECT_EQ(p.tp_layout.kv_heads_per_gpu, 1);
}

TEST(Planner, MlaUnderTpRecommendsDataParallelAttention) {
  const Plan p = make_plan(model_preset("deepseek-v2"), gpu_spec("h200"), workload(8192, 64, 8));
  ASSERT_TRUE(p.mha_equivalent_kv.has_value());
  EXPECT_NEAR(double(p.mha_equivalent_kv->bytes_per_token) / double(p.kv.bytes_per_token), 56.9, 0.1);
  EXPECT_DOUBLE_EQ(p.mla_equivalent_kv_heads, 2.25);
  EXPECT_TRUE(p.tp_layout.latent_duplicated);
  ASSERT_TRUE(p.dp_attention.has_value());
  // Each rank keeps 1/8 of the sequences' latents instead of all of them.
  EXPECT_EQ(p.dp_attention->max_concurrent_sequences, 8 * p.max_concurrent_sequences);
  EXPECT_DOUBLE_EQ(p.dp_attention->kv_bytes_batch_per_gpu * 8, p.kv_bytes_batch_per_gpu);
  EXPECT_LT(p.dp_attention->decode.time_ms, p.decode.time_ms);
  bool recommends = false;
  for (const auto& n : p.notes) recommends |= n.find("data-parallel attention") != std::string::npos;
  EXPECT_TRUE(recommends);
}

TEST(Planner, Fp8KvDoublesCapacity) {
  const Plan bf16 = make_plan(model_preset("llama3-8b"), gpu_spec("h100"), workload(8192, 1, 1, DType::BF16));
  const Plan fp8 = make_plan(model_preset("llama3-8b"), gpu_spec("h100"), workload(8192, 1, 1, DType::F8_E4M3));
  EXPECT_DOUBLE_EQ(fp8.kv.bytes_per_sequence * 2.0, double(bf16.kv.bytes_per_sequence));
  EXPECT_NEAR(double(fp8.max_concurrent_sequences) / double(bf16.max_concurrent_sequences), 2.0, 0.02);
}

TEST(Planner, WorkloadErrorsNameTheFlag) {
  const ModelShape m = model_preset("llama3-8b");
  const HardwareSpec h = gpu_spec("h100");
  const std::pair<Workload, const char*> bad[] = {
      {workload(8192, 0, 1), "--batch"}, {workload(0, 1, 1), "--context"}, {workload(8192, 1, 0), "--tp"},
      {workload(8192, 1, 3), "--tp"}};
  for (const auto& [w, flag] : bad) {
    try {
      make_plan(m, h, w);
      FAIL() << flag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  }
}

TEST(Planner, JsonCarriesUnitsInFieldNames) {
  const nlohmann::json j = plan_to_json(make_plan(model_preset("deepseek-v2"), gpu_spec("h100"), workload(8192, 1, 1)));
  EXPECT_EQ(j["kv"]["bytes_per_sequence"].get<int64_t>(), 566231040);
  EXPECT_GT(j["tpot_ms"].get<double>(), 0);
  EXPECT_TRUE(j["mla"].contains("compression_vs_mha"));
}

TEST(Planner, FormatBytesPrintsBothUnits) {
  EXPECT_EQ(format_bytes(566231040), "566.23 MB (540.00 MiB)");
  EXPECT_EQ(format_bytes(32212254720.0), "32.21 GB (30.00 GiB)");
}

TEST(Sweep, TableCoversEveryKindBatchAndContext) {
  const Sweep s = make_sweep(model_preset("llama3-70b"), gpu_spec("h100"), workload(1, 1, 8));
  // mha, gqa8, mqa, mla, and mla-dp because tp > 1.
  ASSERT_EQ(s.attentions.size(), 5u);
  EXPECT_EQ(s.cells.size(), 5u * 5u * 4u);
  // At batch 1, 1K context every kind is weight-bound and costs about the same;
  // at batch 64, 32K, MHA's KV does not fit. Under TP 8, MQA's one KV head is replicated on
  // all 8 ranks: per GPU it holds exactly what GQA-8 holds (one head), so it costs the same.
  // MLA's latent is duplicated too; with data-parallel attention it fits.
  EXPECT_EQ(s.at(0, 0, 0).dominant_term, "weights");
  EXPECT_FALSE(s.at(0, 3, 3).fits);
  EXPECT_NEAR(s.at(2, 3, 3).tpot_ms / s.at(1, 3, 3).tpot_ms, 1.0, 0.01);
  EXPECT_FALSE(s.at(3, 3, 3).fits);
  EXPECT_TRUE(s.at(4, 3, 3).fits);
  EXPECT_LT(s.at(1, 4, 2).tpot_ms, s.at(0, 4, 2).tpot_ms);
  EXPECT_NE(sweep_to_text(s).find("gqa8"), std::string::npos);
  EXPECT_NE(sweep_gnuplot_script(s, "d.dat", "p.png").find("multiplot"), std::string::npos);
}

}  // namespace
}  // namespace latentserve::perf
