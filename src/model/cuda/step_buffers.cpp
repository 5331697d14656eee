#include "model/cuda/step_buffers.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/paged_decode_attention.h"
#include "core/error.h"

namespace latentserve::cuda {
namespace {

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

// Grow to at least `need`, by half again over the old capacity, so growth happens rarely.
int64_t grown(int64_t cap, int64_t need) { return need <= cap ? cap : std::max(need, cap + cap / 2); }

}  // namespace

StepBuffers::~StepBuffers() {
  if (host_inputs_) cudaFreeHost(host_inputs_);
}

bool StepBuffers::reserve(const ModelDims& d, int64_t n_tokens, int64_t n_seqs, int64_t n_out, int64_t blocks_per_seq,
                          int64_t max_seq_len_bound) {
  const int64_t tokens = grown(tokens_cap_, n_tokens), seqs = grown(seqs_cap_, n_seqs), outs = grown(out_cap_, n_out),
                blocks = grown(blocks_cap_, blocks_per_seq), bound = std::max(bound_cap_, max_seq_len_bound);
  const bool inputs_grow = tokens != tokens_cap_ || seqs != seqs_cap_ || outs != out_cap_ || blocks != blocks_cap_ ||
                           d.rope_table_floats != rope_floats_;
  const bool workspace_grows = seqs != seqs_cap_ || bound != bound_cap_;
  if (!inputs_grow && !workspace_grows) return false;

  if (inputs_grow) {
    Offsets o{};
    size_t at = 0;
    const auto take = [&](size_t bytes) { const size_t here = at; at = align_up(at + bytes); return here; };
    o.token_ids = take(size_t(tokens) * 4);
    o.positions = take(size_t(tokens) * 4);
    o.slot_mapping = take(size_t(tokens) * 8);
    o.query_start_loc = take(size_t(seqs + 1) * 4);
    o.seq_lens = take(size_t(seqs) * 4);
    o.block_tables = take(size_t(seqs * blocks) * 4);
    o.logits_indices = take(size_t(outs) * 4);
    o.rope_rows = take(d.rope_table_floats > 0 ? size_t(tokens) * 4 : 0);
    o.rope_tables = take(size_t(seqs * d.rope_table_floats) * 4);
    o.total = at;
    LS_CUDA_CHECK(cudaDeviceSynchronize());  // nothing may still read the old buffers
    inputs_ = DeviceBuffer(o.total);
    if (host_inputs_) cudaFreeHost(host_inputs_);
    host_inputs_ = nullptr;
    LS_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_inputs_), o.total));
    off_ = o;
    if (tokens != tokens_cap_) {
      const size_t T = size_t(tokens), bf = 2;
      residual_ = DeviceBuffer(T * size_t(d.hidden_size) * 4);
      x_ = DeviceBuffer(T * size_t(d.hidden_size) * bf);
      qkv_ = DeviceBuffer(T * size_t((d.n_head + 2 * d.n_head_kv) * d.head_dim) * bf);
      attn_ = DeviceBuffer(T * size_t(d.n_head * d.head_dim) * bf);
      delta_ = DeviceBuffer(T * size_t(d.hidden_size) * bf);
      gate_up_ = DeviceBuffer(T * size_t(2 * d.intermediate_size) * bf);
      act_ = DeviceBuffer(T * size_t(d.intermediate_size) * bf);
    }
    if (outs != out_cap_) {
      last_ = DeviceBuffer(size_t(outs * d.hidden_size) * 2);
      logits_ = DeviceBuffer(size_t(outs * d.vocab_size) * 4);
      next_tokens_ = DeviceBuffer(size_t(outs) * 4);
    }
  }
  if (workspace_grows) {
    LS_CUDA_CHECK(cudaDeviceSynchronize());
    decode_workspace_ = DeviceBuffer(
        std::max<size_t>(paged_decode_workspace_bytes(int(seqs), int(d.n_head), int(d.head_dim), int(bound)), 256));
    // The fused variants' per-(sequence, head) counters start at zero (each launch leaves them so).
    paged_decode_workspace_init(decode_workspace_.data(), decode_workspace_.bytes(), int(seqs), int(d.n_head), nullptr);
    LS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  tokens_cap_ = tokens;
  seqs_cap_ = seqs;
  out_cap_ = outs;
  blocks_cap_ = blocks;
  bound_cap_ = bound;
  rope_floats_ = d.rope_table_floats;
  return true;
}

void StepBuffers::upload(const ForwardBatch& batch, const StepShape& shape, cudaStream_t stream) {
  const AttentionMetadata& meta = batch.attention;
  const int64_t T = batch.n_tokens(), S = meta.n_seqs(), O = int64_t(batch.logits_indices.size());
  if (shape.n_tokens > tokens_cap_ || shape.n_seqs > seqs_cap_ || shape.n_out > out_cap_ ||
      meta.max_blocks_per_seq > blocks_cap_)
    fail("StepBuffers::upload: the step needs more room than reserve() gave");
  int32_t* tokens = host<int32_t>(off_.token_ids);
  int32_t* positions = host<int32_t>(off_.positions);
  int64_t* slots = host<int64_t>(off_.slot_mapping);
  for (int64_t t = 0; t < shape.n_tokens; ++t) {
    const bool real = t < T;
    tokens[t] = real ? batch.token_ids[size_t(t)] : 0;
    positions[t] = real ? batch.positions[size_t(t)] : 0;
    slots[t] = real ? meta.slot_mapping[size_t(t)] : -1;
  }
  int32_t* qsl = host<int32_t>(off_.query_start_loc);
  int32_t* lens = host<int32_t>(off_.seq_lens);
  int32_t* tables = host<int32_t>(off_.block_tables);
  for (int64_t s = 0; s <= shape.n_seqs; ++s)  // padded sequences own padded token rows, one each
    qsl[s] = s <= S ? meta.query_start_loc[size_t(s)] : qsl[s - 1] + 1;
  for (int64_t s = 0; s < shape.n_seqs; ++s) {
    lens[s] = s < S ? meta.seq_lens[size_t(s)] : 0;
    int32_t* row = tables + s * blocks_cap_;
    std::fill(row, row + blocks_cap_, -1);
    if (s < S)
      std::memcpy(row, meta.block_tables.data() + s * meta.max_blocks_per_seq, size_t(meta.max_blocks_per_seq) * 4);
  }
  int32_t* out_rows = host<int32_t>(off_.logits_indices);
  for (int64_t i = 0; i < shape.n_out; ++i) out_rows[i] = i < O ? batch.logits_indices[size_t(i)] : int32_t(i);

  const auto copy = [&](size_t offset, size_t bytes) {
    LS_CUDA_CHECK(cudaMemcpyAsync(inputs_.as<char>() + offset, host_inputs_ + offset, bytes, cudaMemcpyHostToDevice, stream));
  };
  // One copy from the first array to the end of the block tables in use, then the logits rows.
  const size_t tables_end = off_.block_tables + size_t(shape.n_seqs * blocks_cap_) * 4;
  copy(0, tables_end);
  copy(off_.logits_indices, size_t(shape.n_out) * 4);
}

void StepBuffers::upload_rope_tables(const ForwardBatch& batch, const StepShape& shape,
                                     const std::function<const float*(int64_t seq)>& table_for, cudaStream_t stream) {
  const AttentionMetadata& meta = batch.attention;
  const int64_t T = batch.n_tokens(), S = meta.n_seqs();
  if (rope_floats_ <= 0) fail("StepBuffers::upload_rope_tables: reserve() was given no rope_table_floats");
  if (shape.n_tokens > tokens_cap_ || S > seqs_cap_)
    fail("StepBuffers::upload_rope_tables: the step needs more room than reserve() gave");
  int32_t* rows = host<int32_t>(off_.rope_rows);
  float* tables = host<float>(off_.rope_tables);
  std::fill(rows, rows + shape.n_tokens, 0);
  for (int64_t s = 0; s < S; ++s) {
    std::memcpy(tables + s * rope_floats_, table_for(s), size_t(rope_floats_) * 4);
    for (int64_t t = meta.query_start_loc[size_t(s)]; t < meta.query_start_loc[size_t(s) + 1] && t < T; ++t)
      rows[t] = int32_t(s);
  }
  // rope_rows and rope_tables are adjacent: one copy of what this step uses.
  const size_t bytes = off_.rope_tables - off_.rope_rows + size_t(S * rope_floats_) * 4;
  LS_CUDA_CHECK(cudaMemcpyAsync(inputs_.as<char>() + off_.rope_rows, host_inputs_ + off_.rope_rows, bytes,
                                cudaMemcpyHostToDevice, stream));
}

}  // namespace latentserve::cuda
