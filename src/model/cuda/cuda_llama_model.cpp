#include "model/cuda/cuda_llama_model.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "backend/cuda/activation.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kv_cache.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/paged_attention_generic.h"
#include "backend/cuda/paged_decode_attention.h"
#include "backend/cuda/paged_prefill_attention.h"
#include "backend/cuda/paged_prefill_attention_wgmma.h"
#include "backend/cuda/rope_kv_write.h"
#include "backend/cuda/sampling.h"
#include "core/error.h"
#include "model/cuda/device_weights.h"
#include "model/cuda/step_buffers.h"
#include "model/rope_config.h"

namespace latentserve {
namespace {

// A benchmarking knob's integer value: the whole string, or an error naming the variable
// (std::atoi would read "abc" as 0 and silently turn the feature off).
int env_int(const char* variable, const char* value) {
  int parsed = 0;
  const std::string_view text(value);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    fail("{}='{}' is not an integer", variable, value);
  return parsed;
}

using cuda::DeviceBuffer;

struct DeviceLayer {
  DeviceBuffer input_norm, post_attention_norm, q_norm, k_norm;
  DeviceBuffer qkv, qkv_bias;          // [(nh + 2 nkv) * hd, H], [(nh + 2 nkv) * hd]
  DeviceBuffer o_proj, o_bias;         // [H, nh * hd], [H]
  DeviceBuffer gate_up, gate_up_bias;  // [2 I, H] (gate rows, then up rows), [2 I]
  DeviceBuffer down, down_bias;        // [H, I], [H]
};

// A decode graph serves every step of its batch bucket whose sequences are all at most its
// context bucket long: the decode kernel's grid is sized by that bound, not by the lengths.
struct GraphKey {
  int64_t batch_bucket, context_bucket;
  auto operator<=>(const GraphKey&) const = default;
};

struct DecodeGraph {
  cudaGraphExec_t exec = nullptr;
  ~DecodeGraph() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

int64_t round_up_pow2(int64_t x, int64_t at_least) {
  int64_t p = at_least;
  while (p < x) p *= 2;
  return p;
}

// 1, 2, 4, 8, then multiples of 16: a decode of b sequences pads to at most 16 rows more.
int64_t batch_bucket(int64_t b) { return b <= 8 ? round_up_pow2(b, 1) : (b + 15) / 16 * 16; }

class CudaLlamaModel final : public CausalLM {
 public:
  CudaLlamaModel(ModelConfig config, std::unique_ptr<WeightSource> weights, const ModelOptions& options)
      : config_(std::move(config)),
        device_(options.device_ordinal),
        stream_(device_.stream()),
        graphs_enabled_(options.cuda_graphs) {
    const ModelConfig& c = config_;
    if (c.hidden_act != "silu") fail("hidden_act '{}' is not supported (expected silu)", c.hidden_act);
    if (c.head_dim % 2 != 0 || c.head_dim > 256)
      fail("the CUDA attention kernels take an even head_dim up to 256, found {} (run this model with --device cpu)",
           c.head_dim);
    fast_attention_ = c.head_dim == 64 || c.head_dim == 128;  // else the portable kernel (paged_attention_generic.h)
    spec_ = AttentionSpec::standard(c.n_head, c.n_head_kv, c.head_dim, c.head_dim);
    gemm_ = std::make_unique<cuda::Gemm>();
    // Benchmarking knobs (docs/cuda-backend.md): rows up to which decode GEMMs take the gemv
    // kernel instead of cuBLASLt (0 = cuBLASLt always), and which gemv configuration.
    if (const char* rows = std::getenv("LATENTSERVE_CUDA_GEMV_ROWS"))
      gemm_->set_gemv_max_rows(env_int("LATENTSERVE_CUDA_GEMV_ROWS", rows));
    if (const char* name = std::getenv("LATENTSERVE_CUDA_GEMV_CONFIG")) {
      const auto* found = std::find_if(std::begin(cuda::kGemvConfigs), std::end(cuda::kGemvConfigs),
                                       [&](cuda::GemvConfig g) { return std::string_view(name) == cuda::gemv_config_name(g); });
      if (found == std::end(cuda::kGemvConfigs)) {
        std::string names;
        for (cuda::GemvConfig g : cuda::kGemvConfigs) names += std::string(names.empty() ? "" : ", ") + cuda::gemv_config_name(g);
        fail("LATENTSERVE_CUDA_GEMV_CONFIG='{}' names no gemv configuration ({})", name, names);
      }
      gemm_->set_gemv_config(*found);
    }
    // 0: every GEMM shape takes its first kernel (the gemv for <= 4 rows, else cuBLASLt's first
    // heuristic) instead of the fastest of a timed run: the same kernels in every model built.
    if (const char* on = std::getenv("LATENTSERVE_CUDA_GEMM_AUTOTUNE")) {
      const int value = env_int("LATENTSERVE_CUDA_GEMM_AUTOTUNE", on);
      if (value != 0 && value != 1) fail("LATENTSERVE_CUDA_GEMM_AUTOTUNE={} must be 0 or 1", on);
      gemm_->set_autotune(value == 1);
    }
    // cuBLASLt heuristic results a GEMM shape keeps and the autotune times (default 8).
    if (const char* n = std::getenv("LATENTSERVE_CUDA_GEMM_CANDIDATES")) {
      const int value = env_int("LATENTSERVE_CUDA_GEMM_CANDIDATES", n);
      if (value < 1 || value > cuda::kMaxGemmCandidates)
        fail("LATENTSERVE_CUDA_GEMM_CANDIDATES={} must be in [1, {}]", n, cuda::kMaxGemmCandidates);
      gemm_->set_candidates(value);
    }
    // Steps of up to this many rows run the fused gemv chain (record_fused_gemv; 0 = never).
    if (const char* rows = std::getenv("LATENTSERVE_CUDA_FUSED_GEMV_ROWS")) {
      fused_gemv_rows_ = env_int("LATENTSERVE_CUDA_FUSED_GEMV_ROWS", rows);
      if (fused_gemv_rows_ < 0 || fused_gemv_rows_ > cuda::kGemvMaxRows)
        fail("LATENTSERVE_CUDA_FUSED_GEMV_ROWS={} must be in [0, {}]", rows, cuda::kGemvMaxRows);
    }
    // 1 (the default): the fused chain's q|k|v gemv does RoPE + the K/V write; 0: its own kernel.
    if (const char* on = std::getenv("LATENTSERVE_CUDA_FUSED_ROPE")) {
      const int value = env_int("LATENTSERVE_CUDA_FUSED_ROPE", on);
      if (value != 0 && value != 1) fail("LATENTSERVE_CUDA_FUSED_ROPE={} must be 0 or 1", on);
      fused_rope_ = value == 1;
    }
    // Decode graphs' context buckets per doubling of the length (cuda::decode_context_bucket).
    if (const char* steps = std::getenv("LATENTSERVE_CUDA_CONTEXT_BUCKETS")) {
      context_buckets_per_octave_ = env_int("LATENTSERVE_CUDA_CONTEXT_BUCKETS", steps);
      if (context_buckets_per_octave_ < 1 || context_buckets_per_octave_ > cuda::kDecodeContextBucketsMaxSteps)
        fail("LATENTSERVE_CUDA_CONTEXT_BUCKETS={} must be in [1, {}] (buckets per doubling of the context)", steps,
             cuda::kDecodeContextBucketsMaxSteps);
    }
    // Decode-attention kernel for every decode step instead of the model's choice below.
    if (const char* name = std::getenv("LATENTSERVE_CUDA_DECODE_KERNEL")) {
      for (int k = 0; k < int(cuda::PagedDecodeKernel::kCount); ++k)
        if (std::string_view(name) == cuda::paged_decode_kernel_name(cuda::PagedDecodeKernel(k)))
          decode_kernel_override_ = cuda::PagedDecodeKernel(k);
      if (!decode_kernel_override_)
        fail("LATENTSERVE_CUDA_DECODE_KERNEL='{}' names no decode-attention kernel (base, fused, fused_fill3, ...: "
             "paged_decode_kernel_name)", name);
    }
    load_weights(*weights);
    weights.reset();  // every tensor is on the device now; drop the mmapped checkpoint
    const RopeTables rope = compute_rope_tables(c.rope, c.head_dim, c.max_position_embeddings, c.max_position_embeddings);
    rotary_dim_ = rope.rotary_dim;
    dynamic_rope_ = c.rope.type == RopeType::DynamicNtk;
    attention_factor_ = rope.attention_factor;
    inv_freq_ = DeviceBuffer(rope.inv_freq.size() * sizeof(float));
    inv_freq_.upload(rope.inv_freq.data(), rope.inv_freq.size() * sizeof(float));
    amax_scratch_ = DeviceBuffer(size_t(2 * c.n_head_kv) * sizeof(unsigned));
    device_.synchronize();
  }

  ~CudaLlamaModel() override {
    graphs_.clear();
    cudaStreamSynchronize(stream_);
  }

  const ModelConfig& config() const override { return config_; }
  AttentionSpec attention_spec() const override { return spec_; }
  std::string_view device() const override { return "cuda"; }

  std::unique_ptr<KvCacheMemory> make_kv_cache(int64_t n_blocks, int64_t block_size_tokens,
                                               const cpu::KvCacheOptions& options) const override {
    return std::make_unique<cuda::CudaKvCache>(spec_, n_layer(), n_blocks, block_size_tokens, options, stream_);
  }
  int64_t kv_block_bytes(int64_t block_size_tokens, const cpu::KvCacheOptions& options) const override {
    return cuda::CudaKvCache::block_bytes(spec_, n_layer(), block_size_tokens, options);
  }

  int64_t plan_device_memory(int64_t max_batched_tokens, int64_t max_num_seqs, double gpu_memory_utilization) override {
    if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
      fail("--gpu-memory-utilization must be in (0, 1], found {}", gpu_memory_utilization);
    if (buffers_.reserve(shape_of_config(), std::max<int64_t>(max_batched_tokens, max_num_seqs), max_num_seqs,
                         max_num_seqs, 64, 4096))
      graphs_.clear();  // the buffers moved: captured graphs point at the old ones
    const auto [free_bytes, total_bytes] = device_.memory_info();
    const double target = gpu_memory_utilization * double(total_bytes);
    const double used = double(total_bytes - free_bytes);
    const double reserve = 512.0 * (1 << 20);  // cuBLASLt plans, graphs, decode workspaces that grow with context
    const double budget = target - used - reserve;
    if (budget <= 0)
      fail("--gpu-memory-utilization {}: {:.2f} GiB of the GPU's {:.2f} GiB, but weights and activations already "
           "take {:.2f} GiB: no room for a KV cache",
           gpu_memory_utilization, target / double(1 << 30), double(total_bytes) / double(1 << 30),
           (used + reserve) / double(1 << 30));
    return int64_t(budget);
  }

  void forward(const ForwardBatch& batch, KvCacheMemory& kv, float* logits) override {
    const int64_t n_out = run(batch, cuda::as_cuda_kv_cache(kv));
    if (n_out == 0) return;
    LS_CUDA_CHECK(cudaMemcpyAsync(logits, buffers_.logits(), size_t(n_out * config_.vocab_size) * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
    device_.synchronize();
  }

  void forward_choose(const ForwardBatch& batch, KvCacheMemory& kv, std::span<const TokenChoice> choices,
                      int32_t* next_tokens) override {
    check_choices(batch, choices);
    const int64_t n_out = run(batch, cuda::as_cuda_kv_cache(kv));
    if (n_out == 0) return;
    // run() ends with the argmax of every row; rows that sample overwrite it here.
    const bool sampled = std::any_of(choices.begin(), choices.end(), [](const TokenChoice& c) { return c.temperature > 0; });
    const int* invalid_flag = sampled ? sample_on_device(choices) : nullptr;
    LS_CUDA_CHECK(cudaMemcpyAsync(next_tokens, buffers_.next_tokens(), size_t(n_out) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
    int invalid = 0;
    if (invalid_flag)
      LS_CUDA_CHECK(cudaMemcpyAsync(&invalid, invalid_flag, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    device_.synchronize();
    if (invalid) fail("token sampling on cuda: a logits row holds NaN or no logit above -inf");
  }

 private:
  // The per-row parameters of cuda::sample_rows, uploaded in one copy:
  // [u f64 | temperature f32 | top_p f32 | min_p f32 | top_k i32 | invalid flag i32].
  // Returns the device flag sample_rows sets for a row of NaN or no logit above -inf.
  const int* sample_on_device(std::span<const TokenChoice> choices) {
    const size_t n = choices.size();
    const size_t u_at = 0, temp_at = 8 * n, top_p_at = temp_at + 4 * n, min_p_at = top_p_at + 4 * n,
                 top_k_at = min_p_at + 4 * n, flag_at = top_k_at + 4 * n, bytes = flag_at + 4;
    choice_host_.assign(bytes, 0);
    for (size_t i = 0; i < n; ++i) {
      const TokenChoice& c = choices[i];
      std::memcpy(&choice_host_[u_at + 8 * i], &c.uniform, 8);
      std::memcpy(&choice_host_[temp_at + 4 * i], &c.temperature, 4);
      std::memcpy(&choice_host_[top_p_at + 4 * i], &c.top_p, 4);
      std::memcpy(&choice_host_[min_p_at + 4 * i], &c.min_p, 4);
      std::memcpy(&choice_host_[top_k_at + 4 * i], &c.top_k, 4);
    }
    if (choice_device_.bytes() < bytes) choice_device_ = DeviceBuffer(bytes);
    char* d = choice_device_.as<char>();
    LS_CUDA_CHECK(cudaMemcpyAsync(d, choice_host_.data(), bytes, cudaMemcpyHostToDevice, stream_));
    const int vocab = int(config_.vocab_size);
    const size_t ws = cuda::sample_rows_workspace_bytes(int(n), vocab);
    if (sample_workspace_.bytes() < ws) sample_workspace_ = DeviceBuffer(ws);
    cuda::SampleRowsParams p{};
    p.logits = buffers_.logits();
    p.n_rows = int(n);
    p.vocab = vocab;
    p.temperature = reinterpret_cast<const float*>(d + temp_at);
    p.top_k = reinterpret_cast<const int32_t*>(d + top_k_at);
    p.top_p = reinterpret_cast<const float*>(d + top_p_at);
    p.min_p = reinterpret_cast<const float*>(d + min_p_at);
    p.uniform_f64 = reinterpret_cast<const double*>(d + u_at);
    p.out = buffers_.next_tokens();
    p.workspace = ws ? sample_workspace_.data() : nullptr;
    p.workspace_bytes = ws;
    p.invalid_row_flag = reinterpret_cast<int*>(d + flag_at);
    cuda::sample_rows(p, stream_);
    return p.invalid_row_flag;
  }

  cuda::ModelDims shape_of_config() const {
    const ModelConfig& c = config_;
    return {c.hidden_size, c.intermediate_size, c.n_head, c.n_head_kv, c.head_dim, c.vocab_size,
            dynamic_rope_ ? rotary_dim_ / 2 : 0};
  }

  void load_weights(WeightSource& source) {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden_size, I = c.intermediate_size, dq = c.n_head * c.head_dim,
                  dkv = c.n_head_kv * c.head_dim;
    cuda::DeviceWeightLoader w(source, stream_);
    embed_ = w.matrix({"model.embed_tokens.weight"}, {c.vocab_size}, H);
    final_norm_ = w.vector("model.norm.weight", H);
    if (!c.tie_word_embeddings) lm_head_ = w.matrix({"lm_head.weight"}, {c.vocab_size}, H);
    layers_.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      DeviceLayer& L = layers_[size_t(l)];
      const std::string p = "model.layers." + std::to_string(l), a = p + ".self_attn.", m = p + ".mlp.";
      L.input_norm = w.vector(p + ".input_layernorm.weight", H);
      L.post_attention_norm = w.vector(p + ".post_attention_layernorm.weight", H);
      L.qkv = w.matrix({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, {dq, dkv, dkv}, H);
      if (c.attention_bias)
        L.qkv_bias = w.stacked_vectors({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}, {dq, dkv, dkv});
      L.o_proj = w.matrix({a + "o_proj.weight"}, {H}, dq);
      if (c.o_proj_bias) L.o_bias = w.vector(a + "o_proj.bias", H);
      if (c.qk_norm) {
        L.q_norm = w.vector(a + "q_norm.weight", c.head_dim);
        L.k_norm = w.vector(a + "k_norm.weight", c.head_dim);
      }
      L.gate_up = w.matrix({m + "gate_proj.weight", m + "up_proj.weight"}, {I, I}, H);
      L.down = w.matrix({m + "down_proj.weight"}, {H}, I);
      if (c.mlp_bias) {
        L.gate_up_bias = w.stacked_vectors({m + "gate_proj.bias", m + "up_proj.bias"}, {I, I});
        L.down_bias = w.vector(m + "down_proj.bias", H);
      }
    }
  }

  const void* lm_head() const { return config_.tie_word_embeddings ? embed_.data() : lm_head_.data(); }

  // Uploads the batch, runs every layer and the LM head (logits and greedy tokens stay on the
  // device); returns the number of logits rows.
  int64_t run(const ForwardBatch& batch, cuda::CudaKvCache& kv) {
    const ModelConfig& c = config_;
    const int64_t T = batch.n_tokens();
    const AttentionMetadata& meta = batch.attention;
    if (int64_t(batch.positions.size()) != T || meta.n_tokens() != T)
      fail("forward batch: {} tokens but {} positions and {} slots", T, batch.positions.size(), meta.n_tokens());
    if (kv.n_layer() != c.n_layer) fail("the KV cache has {} layers, the model {}", kv.n_layer(), c.n_layer);
    if (meta.block_size_tokens != kv.block_size_tokens())
      fail("the batch uses blocks of {} tokens, the KV cache {}", meta.block_size_tokens, kv.block_size_tokens());
    if (T == 0) return 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.token_ids[size_t(t)];
      if (id < 0 || id >= c.vocab_size) fail("token id {} at batch row {} is outside the vocabulary [0, {})", id, t, c.vocab_size);
    }
    const int64_t n_out = int64_t(batch.logits_indices.size());
    for (int32_t row : batch.logits_indices)
      if (row < 0 || row >= T) fail("logits index {} is outside the batch of {} tokens", row, T);
    for (int64_t b : meta.block_tables)
      if (b >= kv.n_blocks()) fail("block table entry {} is outside the KV cache of {} blocks", b, kv.n_blocks());

    const int64_t n_seqs = meta.n_seqs(), max_len = meta.max_seq_len();
    const bool pure_decode = n_seqs == T && n_out == T && std::all_of(batch.logits_indices.begin(), batch.logits_indices.end(),
                                                                      [i = 0](int32_t r) mutable { return r == i++; });
    cuda::StepShape shape;
    shape.decode = pure_decode;
    shape.n_tokens = pure_decode ? batch_bucket(T) : T;
    shape.n_seqs = pure_decode ? shape.n_tokens : n_seqs;
    shape.n_out = pure_decode ? shape.n_tokens : n_out;
    shape.max_query_len = 1;
    for (int64_t s = 0; s < n_seqs; ++s)
      shape.max_query_len = std::max<int64_t>(shape.max_query_len, meta.query_start_loc[size_t(s + 1)] - meta.query_start_loc[size_t(s)]);
    shape.max_seq_len_bound = cuda::decode_context_bucket(max_len, context_buckets_per_octave_);
    shape.blocks_per_seq = std::max<int64_t>(meta.max_blocks_per_seq, 1);

    if (buffers_.reserve(shape_of_config(), shape.n_tokens, shape.n_seqs, shape.n_out, shape.blocks_per_seq,
                         shape.max_seq_len_bound))
      graphs_.clear();  // the buffers moved: captured graphs point at the old ones
    shape.blocks_per_seq = buffers_.blocks_per_seq();  // the table stride every step uses (graphs need it fixed)
    buffers_.upload(batch, shape, stream_);
    if (dynamic_rope_)
      buffers_.upload_rope_tables(batch, shape, [&](int64_t s) { return dynamic_rope_table(batch, s); }, stream_);

    const bool capturable = pure_decode && !kv.needs_calibration();
    if (!capturable || !graphs_enabled_) {
      record(shape, kv);
    } else {
      const GraphKey key{shape.n_tokens, shape.max_seq_len_bound};
      auto it = graphs_.find(key);
      if (it == graphs_.end() || kv_of_graphs_ != kv.id()) {
        if (kv_of_graphs_ != kv.id()) graphs_.clear();
        kv_of_graphs_ = kv.id();
        record(shape, kv);  // this step, eagerly: it also builds the GEMM plans the capture will use
        capture(key, shape, kv);
      } else {
        LS_CUDA_CHECK(cudaGraphLaunch(it->second->exec, stream_));
      }
    }
    kv.mark_calibrated();  // the first step with tokens set every FP8 scale it could
    return n_out;
  }

  void capture(const GraphKey& key, const cuda::StepShape& shape, cuda::CudaKvCache& kv) {
    cudaGraph_t graph = nullptr;
    LS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      record(shape, kv);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    LS_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    auto g = std::make_unique<DecodeGraph>();
    const cudaError_t status = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    LS_CUDA_CHECK(status);
    graphs_[key] = std::move(g);
  }

  // Every kernel of one step, on stream_ (eager, or into a graph being captured).
  void record(const cuda::StepShape& shape, cuda::CudaKvCache& kv) {
    if (fused_gemv_fits(shape.n_tokens)) return record_fused_gemv(shape, kv);
    const ModelConfig& c = config_;
    const int T = int(shape.n_tokens), H = int(c.hidden_size), I = int(c.intermediate_size), nh = int(c.n_head),
              nkv = int(c.n_head_kv), hd = int(c.head_dim);
    const int n_qkv = (nh + 2 * nkv) * hd;
    const float eps = float(c.rms_norm_eps);
    cuda::StepBuffers& b = buffers_;
    cuda::embedding_lookup(embed_.data(), b.token_ids(), b.residual(), T, H, int(c.vocab_size), nullptr, stream_);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const DeviceLayer& L = layers_[size_t(l)];
      if (l == 0)
        cuda::rms_norm(b.residual(), L.input_norm.data(), b.x(), T, H, eps, stream_);
      else
        cuda::add_rms_norm(b.residual(), b.delta(), L.input_norm.data(), b.x(), T, H, eps, stream_);
      // qkv[T, (nh + 2 nkv) hd] = x W_qkv^T (+ b)
      gemm_->bf16(b.x(), L.qkv.data(), b.qkv(), T, n_qkv, H, false, L.qkv_bias.data(), stream_);
      if (c.qk_norm) record_qk_norm(L, T);
      attention(int(l), shape, kv, n_qkv);  // qkv -> attn [T, nh hd]; writes this step's K/V
      gemm_->bf16(b.attn(), L.o_proj.data(), b.delta(), T, H, nh * hd, false, L.o_bias.data(), stream_);
      cuda::add_rms_norm(b.residual(), b.delta(), L.post_attention_norm.data(), b.x(), T, H, eps, stream_);
      // [T, 2I] gate|up -> silu(gate) * up [T, I] -> [T, H]
      gemm_->bf16(b.x(), L.gate_up.data(), b.gate_up(), T, 2 * I, H, false, L.gate_up_bias.data(), stream_);
      cuda::silu_mul(b.gate_up(), b.act(), T, I, stream_);
      gemm_->bf16(b.act(), L.down.data(), b.delta(), T, H, I, false, L.down_bias.data(), stream_);
    }
    // Final norm over every row (cheap), then the LM head on the rows that need logits.
    cuda::add_rms_norm(b.residual(), b.delta(), final_norm_.data(), b.x(), T, H, eps, stream_);
    record_logits(shape);
  }

  // Qwen3's per-head norms of q and k, in place in qkv [T, (nh + 2 nkv) hd].
  void record_qk_norm(const DeviceLayer& L, int T) {
    const ModelConfig& c = config_;
    const int nh = int(c.n_head), nkv = int(c.n_head_kv), hd = int(c.head_dim), n_qkv = (nh + 2 * nkv) * hd;
    const float eps = float(c.rms_norm_eps);
    void* qkv = buffers_.qkv();
    cuda::rms_norm_heads_inplace(qkv, n_qkv, T, nh, hd, L.q_norm.data(), eps, stream_);
    cuda::rms_norm_heads_inplace(static_cast<char*>(qkv) + size_t(nh * hd) * 2, n_qkv, T, nkv, hd, L.k_norm.data(),
                                 eps, stream_);
  }

  // The LM head on the rows that need logits (b.x() holds the final-normed rows), then argmax.
  void record_logits(const cuda::StepShape& shape) {
    const ModelConfig& c = config_;
    cuda::StepBuffers& b = buffers_;
    const int n_out = int(shape.n_out), H = int(c.hidden_size);
    cuda::gather_rows(b.x(), b.logits_indices(), b.last(), n_out, H, stream_);
    gemm_->bf16(b.last(), lm_head(), b.logits(), n_out, c.vocab_size, H, true, nullptr, stream_);
    cuda::argmax_rows(b.logits(), n_out, int(c.vocab_size), b.next_tokens(), stream_);
  }

  // A step of a few rows (batch-1 decode) as a chain of fused gemv kernels (gemv.h): each layer
  // is q|k|v with the input norm in front, RoPE + the K/V write, attention, o adding into the
  // residual, gate|up with the post-attention norm in front and SwiGLU behind, down adding into
  // the residual: 6 kernels a layer instead of 9. record()'s arithmetic, except that the normed
  // rows are not rounded to bf16 before the q|k|v and gate|up products (gemv.h). The q|k|v gemv
  // also does RoPE + the K/V write (5 kernels; LATENTSERVE_CUDA_FUSED_ROPE=0 turns that off),
  // except where it cannot: Qwen3's q/k norms sit between
  // the product and the rotation, and an FP8 cache still to be calibrated is measured on the
  // product before anything is written.
  bool fused_gemv_fits(int64_t n_tokens) const {
    const ModelConfig& c = config_;
    return n_tokens >= 1 && n_tokens <= fused_gemv_rows_ && c.hidden_size % 8 == 0 && c.intermediate_size % 8 == 0 &&
           (c.n_head * c.head_dim) % 8 == 0;
  }
  void record_fused_gemv(const cuda::StepShape& shape, cuda::CudaKvCache& kv) {
    const ModelConfig& c = config_;
    const int T = int(shape.n_tokens), H = int(c.hidden_size), I = int(c.intermediate_size), nh = int(c.n_head),
              nkv = int(c.n_head_kv), hd = int(c.head_dim);
    const int n_qkv = (nh + 2 * nkv) * hd;
    const float eps = float(c.rms_norm_eps);
    // SwiGLU pairs gate and up rows in a warp: a one-row configuration takes two rows there.
    const cuda::GemvConfig config = gemm_->gemv_config();
    const cuda::GemvConfig swiglu_config =
        cuda::gemv_config_rows(config) % 2 == 0 ? config : cuda::GemvConfig::Rows2Unroll8;
    const bool rope_in_gemv =
        fused_rope_ && !c.qk_norm && !kv.needs_calibration() && cuda::gemv_config_rows(config) % 2 == 0;
    cuda::StepBuffers& b = buffers_;
    cuda::embedding_lookup(embed_.data(), b.token_ids(), b.residual(), T, H, int(c.vocab_size), nullptr, stream_);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const DeviceLayer& L = layers_[size_t(l)];
      cuda::GemvFusion input_norm;
      input_norm.norm_residual = b.residual();
      input_norm.norm_weight = L.input_norm.data();
      input_norm.norm_eps = eps;
      if (rope_in_gemv) {
        input_norm.rope_kv_write = true;
        input_norm.rope_kv = rope_kv_params(int(l), shape, kv, n_qkv);
      }
      cuda::gemv_bf16_fused(nullptr, L.qkv.data(), b.qkv(), T, n_qkv, H, L.qkv_bias.data(), input_norm, stream_, config);
      if (c.qk_norm) record_qk_norm(L, T);
      attention(int(l), shape, kv, n_qkv, /*kv_written=*/rope_in_gemv);
      cuda::GemvFusion add;
      add.add_to_residual = b.residual();
      cuda::gemv_bf16_fused(b.attn(), L.o_proj.data(), nullptr, T, H, nh * hd, L.o_bias.data(), add, stream_, config);
      cuda::GemvFusion post_norm_swiglu;
      post_norm_swiglu.norm_residual = b.residual();
      post_norm_swiglu.norm_weight = L.post_attention_norm.data();
      post_norm_swiglu.norm_eps = eps;
      post_norm_swiglu.swiglu = true;
      cuda::gemv_bf16_fused(nullptr, L.gate_up.data(), b.act(), T, 2 * I, H, L.gate_up_bias.data(), post_norm_swiglu,
                            stream_, swiglu_config);
      cuda::gemv_bf16_fused(b.act(), L.down.data(), nullptr, T, H, I, L.down_bias.data(), add, stream_, config);
    }
    cuda::rms_norm(b.residual(), final_norm_.data(), b.x(), T, H, eps, stream_);
    record_logits(shape);
  }

  // RoPE + this step's K/V write of one layer, on the q|k|v rows in the step buffer.
  cuda::RopeKvWriteParams rope_kv_params(int layer, const cuda::StepShape& shape, cuda::CudaKvCache& kv, int n_qkv) {
    const ModelConfig& c = config_;
    cuda::StepBuffers& b = buffers_;
    cuda::RopeKvWriteParams r{};
    r.qkv = b.qkv();
    r.qkv_token_stride = n_qkv;
    r.positions = b.positions();
    r.slot_mapping = b.slot_mapping();
    r.kv = kv.layer(layer);
    r.inv_freq = dynamic_rope_ ? b.rope_tables() : inv_freq_.as<float>();
    r.inv_freq_rows = dynamic_rope_ ? b.rope_rows() : nullptr;
    r.attention_factor = attention_factor_;
    r.n_tokens = int(shape.n_tokens);
    r.n_head = int(c.n_head);
    r.n_head_kv = int(c.n_head_kv);
    r.head_dim = int(c.head_dim);
    r.rotary_dim = int(rotary_dim_);
    r.interleaved = c.rope.interleaved;
    return r;
  }

  // RoPE + the K/V write as a kernel of its own; an FP8 cache still to be calibrated gets its
  // scales from the rotated K and V first.
  void write_rope_kv(int layer, const cuda::StepShape& shape, cuda::CudaKvCache& kv, int n_qkv) {
    cuda::RopeKvWriteParams r = rope_kv_params(layer, shape, kv, n_qkv);
    if (kv.needs_calibration()) {  // rotate, set the scales, then write
      r.write_kv = false;
      cuda::rope_and_write_kv(r, stream_);
      cuda::calibrate_kv_scales(r, kv.static_scale_headroom(), amax_scratch_.as<unsigned>(), stream_);
      r.apply_rope = false;
      r.write_kv = true;
    }
    cuda::rope_and_write_kv(r, stream_);
  }

  // qkv -> attn [T, nh hd]: RoPE + the K/V write (unless the q|k|v gemv did it: kv_written), then
  // decode or prefill attention.
  void attention(int layer, const cuda::StepShape& shape, cuda::CudaKvCache& kv, int n_qkv, bool kv_written = false) {
    const ModelConfig& c = config_;
    cuda::StepBuffers& b = buffers_;
    const cuda::DeviceKvLayer kv_layer = kv.layer(layer);
    if (!kv_written) write_rope_kv(layer, shape, kv, n_qkv);

    const float scale = float(c.softmax_scale);
    const int window = int(c.sliding_window.value_or(0));
    if (shape.decode && fast_attention_) {
      cuda::PagedDecodeParams p{};
      p.q = b.qkv();
      p.q_seq_stride = n_qkv;
      p.kv = kv_layer;
      p.out = b.attn();
      p.seq_lens = b.seq_lens();
      p.block_tables = b.block_tables();
      p.n_seqs = int(shape.n_seqs);
      p.max_blocks_per_seq = int(shape.blocks_per_seq);
      p.block_size = int(kv.block_size_tokens());
      p.n_head = int(c.n_head);
      p.n_head_kv = int(c.n_head_kv);
      p.head_dim = int(c.head_dim);
      p.softmax_scale = scale;
      p.sliding_window = window;
      p.max_seq_len_bound = int(shape.max_seq_len_bound);
      // The fused variant merges split-KV partials in the last CTA of each (sequence, KV head):
      // no merge kernel, which cost 8.8 us a layer at batch 1 (ncu, Llama-3-8B shape); for
      // large groups (MQA) the separate merge measured faster. FP8 (groups <= 16): fused while
      // the step has <= 64 (sequence, KV head) pairs (one CTA per SM), else three CTAs per SM
      // (fused_fill3): H200 2026-12-06, 1.03-1.12x base at batch >= 16, fused 1.12-1.19x at
      // batch 1 (docs/cuda-decode-attention.md, "Three CTAs per SM").
      const int64_t group = c.n_head / c.n_head_kv;
      if (kv_layer.dtype == cuda::KvDtype::Bf16 && group <= 8)
        p.tuning.kernel = cuda::PagedDecodeKernel::Fused;
      if (kv_layer.dtype == cuda::KvDtype::Fp8E4M3 && group <= 16)
        p.tuning.kernel = shape.n_seqs * c.n_head_kv <= 64 ? cuda::PagedDecodeKernel::Fused
                                                           : cuda::PagedDecodeKernel::FusedFill3;
      if (decode_kernel_override_) p.tuning.kernel = *decode_kernel_override_;
      p.workspace = b.decode_workspace();
      p.workspace_bytes = b.decode_workspace_bytes();
      cuda::paged_decode_attention(p, stream_);
    } else {
      cuda::PagedPrefillParams p{};
      p.q = b.qkv();
      p.q_token_stride = n_qkv;
      p.kv = kv_layer;
      p.out = b.attn();
      p.query_start_loc = b.query_start_loc();
      p.seq_lens = b.seq_lens();
      p.block_tables = b.block_tables();
      p.n_seqs = int(shape.n_seqs);
      p.n_tokens = int(shape.n_tokens);
      p.max_blocks_per_seq = int(shape.blocks_per_seq);
      p.block_size = int(kv.block_size_tokens());
      p.max_query_len = int(shape.max_query_len);
      p.n_head = int(c.n_head);
      p.n_head_kv = int(c.n_head_kv);
      p.head_dim = int(c.head_dim);
      p.softmax_scale = scale;
      p.sliding_window = window;
      // head_dim 128: the wgmma kernels (H200, bench_cuda_prefill_attention, bf16 GQA-8: the 256-row
      // tile 461 TFLOP/s at 8K and 286 at 1K, vs 371 / 256 for the 128-row tile and 326 / 234 for
      // w8m2); chunks shorter than 256 take the 128-row tile (less padding). Otherwise (head_dim 64)
      // long prompts take the 256-row mma.sync tile and short chunks the 128-row one.
      const bool long_chunk = shape.max_query_len >= 256;
      if (cuda::prefill_wgmma_supported(p))
        p.variant = long_chunk ? cuda::PrefillKernelVariant::WgmmaM256 : cuda::PrefillKernelVariant::Wgmma;
      else
        p.variant = long_chunk ? cuda::PrefillKernelVariant::W8M2 : cuda::PrefillKernelVariant::Base;
      if (fast_attention_)
        cuda::paged_prefill_attention(p, stream_);
      else
        cuda::paged_attention_generic(p, stream_);
    }
  }

  // Dynamic NTK grows the RoPE base with the sequence length as the CPU model does
  // (llama_family.cpp): a whole prompt uses its full length, each decode token its position + 1;
  // tables per length computed on the host (compute_rope_tables, bit-equal to the CPU's) and kept.
  const float* dynamic_rope_table(const ForwardBatch& batch, int64_t seq) {
    const AttentionMetadata& meta = batch.attention;
    int64_t seq_len = meta.seq_lens[size_t(seq)];
    if (size_t(seq) < batch.prompt_lens.size()) seq_len = std::max<int64_t>(seq_len, batch.prompt_lens[size_t(seq)]);
    // Up to max_position_embeddings every length has the default table: one key for all of them.
    seq_len = std::max<int64_t>(seq_len, config_.max_position_embeddings);
    auto it = dynamic_tables_.find(seq_len);
    if (it == dynamic_tables_.end()) {
      if (dynamic_tables_.size() >= 4096) dynamic_tables_.clear();  // bounded: decode adds one length per step
      RopeTables t = compute_rope_tables(config_.rope, config_.head_dim, config_.max_position_embeddings, seq_len);
      it = dynamic_tables_.emplace(seq_len, std::move(t.inv_freq)).first;
    }
    return it->second.data();
  }

  ModelConfig config_;
  AttentionSpec spec_;
  cuda::CudaDevice device_;
  cudaStream_t stream_;
  std::unique_ptr<cuda::Gemm> gemm_;
  DeviceBuffer embed_, lm_head_, final_norm_, inv_freq_;
  DeviceBuffer amax_scratch_;  // FP8 calibration: [2 * n_head_kv] amax bits
  DeviceBuffer choice_device_, sample_workspace_;  // sample_on_device's parameters and sample_rows' workspace
  std::vector<char> choice_host_;
  std::vector<DeviceLayer> layers_;
  int64_t rotary_dim_ = 0;
  float attention_factor_ = 1.0f;
  bool dynamic_rope_ = false;
  std::map<int64_t, std::vector<float>> dynamic_tables_;  // seq_len -> inv_freq (dynamic NTK)
  cuda::StepBuffers buffers_;
  std::map<GraphKey, std::unique_ptr<DecodeGraph>> graphs_;
  int context_buckets_per_octave_ = cuda::kDecodeContextBucketsPerOctave;
  uint64_t kv_of_graphs_ = 0;  // CudaKvCache::id() of the cache the graphs were captured on (they bake in its pointers)
  bool graphs_enabled_;
  bool fast_attention_ = false;  // head_dim 64 or 128: the tensor-core kernels
  std::optional<cuda::PagedDecodeKernel> decode_kernel_override_;  // LATENTSERVE_CUDA_DECODE_KERNEL
  int fused_gemv_rows_ = 1;  // LATENTSERVE_CUDA_FUSED_GEMV_ROWS: steps of <= this many rows run record_fused_gemv
  // LATENTSERVE_CUDA_FUSED_ROPE (default 1): the chain's q|k|v gemv does RoPE + the K/V write;
  // 0 runs the RoPE kernel of its own (for A/B runs and the bit-equality test).
  bool fused_rope_ = true;
};

}  // namespace

std::unique_ptr<CausalLM> make_cuda_llama_family(ModelConfig config, std::unique_ptr<WeightSource> weights,
                                                 const ModelOptions& options) {
  return std::make_unique<CudaLlamaModel>(std::move(config), std::move(weights), options);
}

}  // namespace latentserve
