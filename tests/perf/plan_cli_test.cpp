// `latentserve plan` as a user runs it: --json parses and carries the planner's figures;
// bad flags exit non-zero with an error naming the flag.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Output {
  int exit_code;
  std::string text;
};

Output run(const std::string& args, bool with_stderr = true) {
  std::string cmd = std::string(LATENTSERVE_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) text.append(buf.data(), n);
  int status = pclose(pipe);
  return {WEXITSTATUS(status), text};
}

TEST(PlanCli, JsonCarriesTheFigures) {
  Output out = run("plan --preset llama3-70b --gpu h100 --context 8192 --batch 32 --tp 4 --json", false);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const auto j = nlohmann::json::parse(out.text);
  // 327,680 B/token (2 x 80 x 8 x 128 x 2 B) x 8192 tokens = 2.684 GB per sequence; x 32 = 85.9 GB.
  EXPECT_EQ(j["kv"]["bytes_per_token"].get<int64_t>(), 327680);
  EXPECT_EQ(j["kv"]["bytes_per_token_per_layer"].get<int64_t>(), 4096);
  EXPECT_EQ(j["kv"]["bytes_per_sequence"].get<int64_t>(), 2684354560);
  EXPECT_EQ(j["kv"]["bytes_batch"].get<int64_t>(), 32 * 2684354560LL);
  EXPECT_EQ(j["tp"]["kv_heads_per_gpu"].get<int>(), 2);
  EXPECT_EQ(j["tp"]["kv_head_replication"].get<int>(), 1);
  EXPECT_NEAR(j["hardware"]["ridge_flop_per_byte"].get<double>(), 295, 1);
  EXPECT_EQ(j["regime"].get<std::string>(), "weight-bound");
  for (const char* key : {"tpot_ms", "ttft_ms"}) EXPECT_GT(j[key].get<double>(), 0) << key;
  for (const char* key : {"weight_bytes", "kv_bytes", "flops", "arithmetic_intensity_flop_per_byte", "time_ms"})
    EXPECT_TRUE(j["decode"].contains(key)) << key;
  EXPECT_GT(j["capacity"]["max_concurrent_sequences"].get<int>(), 32);
  EXPECT_NEAR(j["weights"]["bytes_total"].get<double>() / 1e9, 141.1, 0.1);
}

TEST(PlanCli, MlaJsonAndTextShowTheLatent) {
  Output out = run("plan --preset deepseek-v2 --gpu h200 --context 8192 --batch 32 --tp 8 --json", false);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const auto j = nlohmann::json::parse(out.text);
  EXPECT_EQ(j["kv"]["bytes_per_sequence"].get<int64_t>(), 566231040);  // 576 x 2 B x 60 x 8192
  EXPECT_EQ(j["mla"]["mha_equivalent_kv"]["bytes_per_sequence"].get<int64_t>(), 32212254720);
  EXPECT_TRUE(j["tp"]["latent_duplicated"].get<bool>());
  EXPECT_TRUE(j["mla"].contains("dp_attention"));
  Output text = run("plan --preset deepseek-v2 --gpu h200 --context 8192 --batch 32 --tp 8");
  ASSERT_EQ(text.exit_code, 0) << text.text;
  EXPECT_NE(text.text.find("566.23 MB (540.00 MiB)"), std::string::npos) << text.text;
  EXPECT_NE(text.text.find("32.21 GB (30.00 GiB)"), std::string::npos) << text.text;
  EXPECT_NE(text.text.find("data-parallel attention"), std::string::npos);
}

TEST(PlanCli, BadFlagsNameTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"plan --preset gpt-9", "--preset"},
      {"plan --preset llama3-8b --gpu v100", "--gpu"},
      {"plan --preset llama3-8b --batch 0", "--batch"},
      {"plan --preset llama3-8b --context 0", "--context"},
      {"plan --preset llama3-8b --tp 3", "--tp"},
      {"plan --preset llama3-70b --tp 128", "--tp"},
      {"plan --preset llama3-8b --kv-cache-dtype int4", "--kv-cache-dtype"},
      {"plan --preset llama3-8b --attention gqa5", "--attention"},
      {"plan --preset llama3-8b --batch many", "--batch"},
      {"plan --gpu h100", "--model"},
  };
  for (const auto& [args, flag] : cases) {
    Output out = run(args);
    EXPECT_NE(out.exit_code, 0) << args;
    EXPECT_NE(out.text.find(flag), std::string::npos) << args << "\n" << out.text;
  }
}

TEST(PlanCli, SweepPrintsTheTableAndWritesThePlot) {
  const auto dir = std::filesystem::temp_directory_path() / "latentserve_plan_sweep_test";
  std::filesystem::create_directories(dir);
  const auto png = dir / "sweep.png";
  Output out = run("plan --sweep --preset llama3-70b --gpu h100 --tp 8 --plot " + png.string());
  ASSERT_EQ(out.exit_code, 0) << out.text;
  for (const char* s : {"mha", "gqa8", "mqa", "mla", "mla-dp", "32K", "128"})
    EXPECT_NE(out.text.find(s), std::string::npos) << s;
  EXPECT_TRUE(std::filesystem::exists(dir / "sweep.png.dat"));
  if (std::system("command -v gnuplot > /dev/null") == 0) {
    EXPECT_TRUE(std::filesystem::exists(png)) << out.text;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

TEST(BenchCli, BadFlagsNameTheFlagBeforeMeasuring) {
  const std::pair<const char*, const char*> cases[] = {
      {"bench decode --synthetic gpt-9", "--synthetic"},
      {"bench decode --attention mha,gqa5", "--attention"},
      {"bench decode --batch 0", "--batch"},
      {"bench decode --context 1024,x", "--context"},
      {"bench decode --fill zeros", "--fill"},
      {"bench decode --steps 0", "--steps"},
      {"bench decode --model tests/fixtures/llama_gqa_bf16 --attention mha", "--attention"},
      {"bench decode --model /no/such/checkpoint", "/no/such/checkpoint"},
  };
  for (const auto& [args, flag] : cases) {
    Output out = run(args);
    EXPECT_NE(out.exit_code, 0) << args;
    EXPECT_NE(out.text.find(flag), std::string::npos) << args << "\n" << out.text;
    EXPECT_EQ(out.text.find("measuring"), std::string::npos) << args;  // failed before the probes
  }
}

// --model DIR measures that checkpoint: its own attention kind, and a floor over the bytes of
// every tensor a decode step reads (all of model.safetensors but the embedding table, which a
// step reads a row of), both read here from config.json and the safetensors header.
TEST(BenchCli, ModelDirMeasuresThatCheckpoint) {
  const std::filesystem::path dir = std::filesystem::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_bf16";
  const std::string json_path = (std::filesystem::temp_directory_path() / "bench_model_dir_test.json").string();
  Output out = run("bench decode --model " + dir.string() + " --batch 1,2 --context 40 --steps 2 --warmup 1 --json " +
                   json_path);
  ASSERT_EQ(out.exit_code, 0) << out.text;
  std::ifstream config_in(dir / "config.json");
  const auto config = nlohmann::json::parse(config_in);
  const int group = config["num_attention_heads"].get<int>() / config["num_key_value_heads"].get<int>();
  std::ifstream st(dir / "model.safetensors", std::ios::binary);
  uint64_t header_bytes = 0;
  st.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, '\0');
  st.read(header.data(), std::streamsize(header_bytes));
  double read_per_step = 0;
  const auto tensors = nlohmann::json::parse(header);
  for (const auto& [name, t] : tensors.items())
    if (name != "__metadata__" && name != "model.embed_tokens.weight")
      read_per_step += double(t["data_offsets"][1].get<int64_t>() - t["data_offsets"][0].get<int64_t>());
  std::ifstream result_in(json_path);
  const auto result = nlohmann::json::parse(result_in);
  ASSERT_EQ(result["rows"].size(), 2u);
  for (const auto& row : result["rows"]) {
    EXPECT_EQ(row["attention"], "gqa" + std::to_string(group));
    EXPECT_DOUBLE_EQ(row["weight_bytes"].get<double>(), read_per_step);
    EXPECT_GT(row["measured_tpot_ms"].get<double>(), 0.0);
    EXPECT_EQ(row["context_tokens"], 40);
  }
  EXPECT_EQ(result["weight_dtype"], "BF16");
  std::filesystem::remove(json_path);
}

// --kv-cache-dtype on the CPU: the cache is stored in that dtype, and the floor charges its
// bytes, (n_layer x 2 x n_kv x head_dim) elements per cached token at 4, 2 or 1 bytes.
TEST(BenchCli, CpuKvCacheDtypeSetsTheCachedBytes) {
  const std::filesystem::path dir = std::filesystem::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_bf16";
  std::ifstream config_in(dir / "config.json");
  const auto config = nlohmann::json::parse(config_in);
  const double elements_per_token = double(config["num_hidden_layers"].get<int>()) * 2 *
                                    config["num_key_value_heads"].get<int>() *
                                    config["head_dim"].get<int>();
  for (const auto& [dtype, bytes] : {std::pair{"f32", 4.0}, std::pair{"bf16", 2.0}, std::pair{"fp8_e4m3", 1.0}}) {
    const std::string json_path =
        (std::filesystem::temp_directory_path() / (std::string("bench_kv_dtype_") + dtype + ".json")).string();
    Output out = run("bench decode --model " + dir.string() + " --kv-cache-dtype " + dtype +
                     " --batch 2 --context 48 --steps 2 --warmup 1 --json " + json_path);
    ASSERT_EQ(out.exit_code, 0) << dtype << "\n" << out.text;
    std::ifstream result_in(json_path);
    const auto result = nlohmann::json::parse(result_in);
    EXPECT_EQ(result["kv_cache_dtype"], dtype);
    ASSERT_EQ(result["rows"].size(), 1u);
    const auto& row = result["rows"][0];
    EXPECT_GT(row["measured_tpot_ms"].get<double>(), 0.0);
    const double tokens = 2 * std::floor(row["mean_context_tokens"].get<double>() + 0.5);  // the floor's context
    EXPECT_NEAR(row["kv_bytes"].get<double>(), tokens * elements_per_token * bytes, 1e-6 * tokens * elements_per_token)
        << dtype;
    std::filesystem::remove(json_path);
  }
}

}  // namespace
