#pragma once
// Token embedding into the f32 residual stream, and the row gather that picks the rows
// needing logits before the LM head. One CTA per output row; 16-byte loads when dim % 8 == 0
// and the pointers are 16-byte aligned, scalar otherwise.
#include <cuda_runtime.h>

#include <cstdint>

namespace latentserve::cuda {

// residual: f32 [n_tokens, dim] = table: bf16 [vocab, dim] rows of token_ids (device int32).
// An id outside [0, vocab) writes zeros and sets *bad_token_flag = 1 (device int, may be null;
// never cleared here); callers validate ids on the host first.
void embedding_lookup(const void* table, const int32_t* token_ids, float* residual, int n_tokens, int dim, int vocab,
                      int* bad_token_flag, cudaStream_t s);
// out: bf16 [n_out, dim] = in: bf16 rows indices[i] (device int32). The caller guarantees the
// indices are rows of `in` (the launcher cannot see them); a negative index writes zeros.
void gather_rows(const void* in, const int32_t* indices, void* out, int n_out, int dim, cudaStream_t s);

}  // namespace latentserve::cuda
