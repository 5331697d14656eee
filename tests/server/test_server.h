#pragma once
// A latentserve server in the test process: the llama_gqa_f32 fixture (transformers'
// reference logits and greedy continuations) with a byte-level tokenizer.json (id == byte)
// and a ChatML chat template, served on a free port of 127.0.0.1 from a background thread.
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/byte_level_tokenizer.h"
#include "engine/llm_engine.h"
#include "model/architectures.h"
#include "model/model_config.h"
#include "model/weight_source.h"
#include "server/async_engine.h"
#include "server/openai_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace latentserve::testing {

inline const std::filesystem::path kServerFixture = std::filesystem::path(LATENTSERVE_FIXTURES_DIR) / "llama_gqa_f32";

inline const char* kChatMlTemplate =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

inline nlohmann::json fixture_reference() {
  std::ifstream in(kServerFixture / "reference.json");
  return nlohmann::json::parse(in);
}

// The model folder a user would point `serve` at. tokenizer_ids: how many of the 256 byte
// tokens tokenizer.json keeps (fewer: the model's vocabulary is larger than the tokenizer's,
// as in checkpoints whose embedding rows are padded).
inline std::filesystem::path make_served_model_dir(const std::string& tag, int tokenizer_ids = 256) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("latentserve_server_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) fs::copy_file(kServerFixture / f, dir / f);
  nlohmann::json tokenizer = byte_level_tokenizer_json();
  nlohmann::json& vocab = tokenizer["model"]["vocab"];
  for (auto it = vocab.begin(); it != vocab.end();) it = it.value().get<int>() >= tokenizer_ids ? vocab.erase(it) : std::next(it);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json{{"chat_template", kChatMlTemplate}, {"bos_token", nullptr}, {"eos_token", "\x02"}}.dump();
  return dir;
}

// A Llama of random bf16 weights big enough that a decode step takes milliseconds on a CPU
// (~46M parameters), so that a long request is still running when its client leaves.
inline std::unique_ptr<CausalLM> slow_synthetic_llama(ThreadPool& pool) {
  const nlohmann::json config = {{"model_type", "llama"}, {"hidden_size", 512}, {"num_hidden_layers", 4},
                                 {"num_attention_heads", 8}, {"num_key_value_heads", 8}, {"intermediate_size", 1536},
                                 {"vocab_size", 32000}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 10000.0}, {"torch_dtype", "bfloat16"}};
  return build_causal_lm(ModelConfig::from_json(config, "slow synthetic llama"),
                         std::make_unique<SyntheticWeights>(DType::BF16, 7), pool);
}

enum class ServedModel { Fixture, FixtureTokenizerOf200, SlowSyntheticNoTokenizer };

class TestServer {
 public:
  explicit TestServer(EngineConfig engine_config = default_engine_config(), server::ServerConfig config = {},
                      ServedModel which = ServedModel::Fixture)
      : dir_(make_served_model_dir("inproc", which == ServedModel::FixtureTokenizerOf200 ? 200 : 256)), pool_(2) {
    if (which != ServedModel::SlowSyntheticNoTokenizer) {
      model_ = load_causal_lm(dir_, pool_, {});
      tokenizer_ = tokenizer::Tokenizer::from_file((dir_ / "tokenizer.json").string());
      chat_.emplace(tokenizer::ChatTemplate::from_config_file((dir_ / "tokenizer_config.json").string()));
    } else {
      model_ = slow_synthetic_llama(pool_);
    }
    engine_config.scheduler.max_model_len = model_->config().max_position_embeddings;
    engine_ = std::make_unique<LLMEngine>(*model_, engine_config, pool_, tokenizer_ ? &*tokenizer_ : nullptr);
    async_ = std::make_unique<server::AsyncEngine>(*engine_);
    config.port = 0;
    if (config.served_model_name.empty()) config.served_model_name = "tiny-llama";
    config.max_model_len = engine_config.scheduler.max_model_len;
    config_ = config;
    http_ = std::make_unique<server::OpenAiServer>(*async_, tokenizer_ ? &*tokenizer_ : nullptr, chat_ ? &*chat_ : nullptr, config);
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->run(); });
    httplib::Client c = client();
    for (int i = 0; i < 200 && !c.Get("/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~TestServer() {
    http_->stop();
    thread_.join();
    async_->shutdown();
    std::filesystem::remove_all(dir_);
  }

  static EngineConfig default_engine_config() {
    EngineConfig c;
    c.kv_cache_bytes = int64_t(64) << 20;
    c.scheduler.max_num_seqs = 16;
    c.scheduler.max_num_batched_tokens = 64;
    return c;
  }

  // What SIGTERM does in `serve`: abort what is open, let it finish its response, close.
  void stop_http(std::chrono::milliseconds drain) { http_->stop(drain); }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const tokenizer::ChatTemplate& chat_template() const { return *chat_; }
  server::AsyncEngine& engine() { return *async_; }
  const std::string& model_name() const { return config_.served_model_name; }

 private:
  std::filesystem::path dir_;
  ThreadPool pool_;
  std::unique_ptr<CausalLM> model_;
  std::optional<tokenizer::Tokenizer> tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_;
  std::unique_ptr<LLMEngine> engine_;
  std::unique_ptr<server::AsyncEngine> async_;
  server::ServerConfig config_;
  std::unique_ptr<server::OpenAiServer> http_;
  std::thread thread_;
  int port_ = -1;
};

}  // namespace latentserve::testing
