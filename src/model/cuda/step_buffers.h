#pragma once
// StepBuffers: the device memory one forward step of the CUDA Llama model works in, and the
// pinned host staging its inputs travel through. Sized by capacity (grow-only), so that a
// captured decode graph keeps pointing at valid buffers: reserve() says when they moved.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "backend/cuda/device_buffer.h"
#include "model/forward_batch.h"

namespace latentserve::cuda {

struct ModelDims {
  int64_t hidden_size, intermediate_size, n_head, n_head_kv, head_dim, vocab_size;
  int64_t rope_table_floats = 0;  // > 0: room for one RoPE inv_freq table of this many floats per sequence (dynamic NTK)
};

// What one step computes over (padded for a graph bucket when decode).
struct StepShape {
  bool decode = false;        // every sequence brings one token: the decode kernel
  int64_t n_tokens = 0;       // rows of the activations (a decode bucket pads with empty rows)
  int64_t n_seqs = 0;
  int64_t n_out = 0;          // rows that get logits
  int64_t max_query_len = 1;
  int64_t max_seq_len_bound = 0;  // power of two >= every seq_len: sizes the decode grid
  int64_t blocks_per_seq = 0;     // block-table stride
};

class StepBuffers {
 public:
  StepBuffers() = default;
  ~StepBuffers();
  StepBuffers(const StepBuffers&) = delete;
  StepBuffers& operator=(const StepBuffers&) = delete;

  // Grows the buffers to hold at least these sizes; true when anything was reallocated.
  bool reserve(const ModelDims& dims, int64_t n_tokens, int64_t n_seqs, int64_t n_out, int64_t blocks_per_seq,
               int64_t max_seq_len_bound);
  // Copies the batch's inputs to the device (asynchronously, on `stream`), laid out for
  // `shape`: rows past the batch are padding (token 0, slot -1, sequence length 0, no blocks),
  // block tables re-strided to blocks_per_seq().
  void upload(const ForwardBatch& batch, const StepShape& shape, cudaStream_t stream);
  // Dynamic NTK: sequence s's inv_freq table (table_for(s), rope_table_floats floats) into row s
  // of rope_tables(), and each token's row into rope_rows() (padding rows: row 0).
  void upload_rope_tables(const ForwardBatch& batch, const StepShape& shape,
                          const std::function<const float*(int64_t seq)>& table_for, cudaStream_t stream);

  int64_t blocks_per_seq() const { return blocks_cap_; }

  // inputs
  const int32_t* token_ids() const { return ptr<int32_t>(off_.token_ids); }
  const int32_t* positions() const { return ptr<int32_t>(off_.positions); }
  const int64_t* slot_mapping() const { return ptr<int64_t>(off_.slot_mapping); }
  const int32_t* query_start_loc() const { return ptr<int32_t>(off_.query_start_loc); }
  const int32_t* seq_lens() const { return ptr<int32_t>(off_.seq_lens); }
  const int32_t* block_tables() const { return ptr<int32_t>(off_.block_tables); }
  const int32_t* logits_indices() const { return ptr<int32_t>(off_.logits_indices); }
  const int32_t* rope_rows() const { return ptr<int32_t>(off_.rope_rows); }  // [T] row of rope_tables per token
  const float* rope_tables() const { return ptr<float>(off_.rope_tables); }  // f32 [n_seqs, rope_table_floats]
  // activations
  float* residual() const { return residual_.as<float>(); }  // f32 [T, H]
  void* x() const { return x_.data(); }                      // bf16 [T, H] normed hidden
  void* qkv() const { return qkv_.data(); }                  // bf16 [T, (nh + 2 nkv) hd]
  void* attn() const { return attn_.data(); }                // bf16 [T, nh hd]
  void* delta() const { return delta_.data(); }              // bf16 [T, H] attention or MLP output
  void* gate_up() const { return gate_up_.data(); }          // bf16 [T, 2 I]
  void* act() const { return act_.data(); }                  // bf16 [T, I]
  void* last() const { return last_.data(); }                // bf16 [n_out, H]
  float* logits() const { return logits_.as<float>(); }      // f32 [n_out, vocab]
  int32_t* next_tokens() const { return next_tokens_.as<int32_t>(); }  // [n_out]
  void* decode_workspace() const { return decode_workspace_.data(); }
  size_t decode_workspace_bytes() const { return decode_workspace_.bytes(); }

 private:
  struct Offsets {  // byte offsets of each input array in inputs_ (and in the pinned mirror)
    size_t token_ids, positions, slot_mapping, query_start_loc, seq_lens, block_tables, logits_indices, rope_rows,
        rope_tables, total;
  };
  template <typename T>
  T* ptr(size_t offset) const { return reinterpret_cast<T*>(inputs_.as<char>() + offset); }
  template <typename T>
  T* host(size_t offset) const { return reinterpret_cast<T*>(host_inputs_ + offset); }

  int64_t tokens_cap_ = 0, seqs_cap_ = 0, out_cap_ = 0, blocks_cap_ = 0, bound_cap_ = 0, rope_floats_ = 0;
  Offsets off_{};
  DeviceBuffer inputs_, residual_, x_, qkv_, attn_, delta_, gate_up_, act_, last_, logits_, next_tokens_,
      decode_workspace_;
  char* host_inputs_ = nullptr;  // pinned, off_.total bytes
};

}  // namespace latentserve::cuda
