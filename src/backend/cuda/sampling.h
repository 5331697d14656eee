#pragma once
// Token choice on the GPU, so decoding never copies logits to the host.
//
// argmax_rows: greedy. sample_rows: the CPU Sampler's (src/sampling/sampler.cpp) filtered
// sampling, in f64 as it computes, for the same u:
//   x = double(logit) / double(temperature);  m = max x
//   min_p:  keep x >= m + log(min_p)            (min_p > 0; and x > -inf always)
//   top_k:  keep x >= the k-th largest kept x   (0 < k < #kept; ties at the k-th stay)
//   top_p:  over what min_p / top_k kept, by (x desc, id asc): keep a token while the mass of
//           the tokens before it is < top_p * kept mass (top_p < 1)
//   draw:   target = u * mass of the kept tokens; the first token whose cumulative mass
//           exceeds target, walking the kept tokens in the CPU's order: id order when top_p
//           is off (1), (x desc, id asc) when it is on; past the end (rounding), the last one.
// Differences from the CPU Sampler (docs/cuda-kernels.md):
//   * no repetition / frequency / presence penalties (the caller applies them first or uses
//     the CPU path) and no logprobs;
//   * NaN logits are skipped and a row with no logit > -inf gives token 0 (the CPU throws);
//     SampleRowsParams::invalid_row_flag reports both;
//   * the parameters arrive as f32: the same token as the CPU for parameters that are f32
//     values (temperature 0.7f, not 0.7); u: pass uniform_f64 (SamplerRng::next_uniform's
//     53-bit draw) for the exact CPU draw, f32 `uniform` rounds it;
//   * sums are f64 in another order (tree / atomic): the token can differ only where u *
//     mass or top_p * mass lands within ~1e-15 relative of a cumulative boundary.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace latentserve::cuda {

// logits: f32 [n_rows, vocab] -> out: int32 [n_rows], the first index of the largest value
// (torch.argmax's rule); NaN never wins; a row of only NaN gives 0. One CTA per row.
void argmax_rows(const float* logits, int n_rows, int vocab, int32_t* out, cudaStream_t s);

// Per row (all device arrays of n_rows): temperature (<= 0: greedy, as argmax_rows), top_k
// (0 or < 0 = off), top_p (>= 1 = off), min_p (<= 0 = off), uniform u in [0, 1) (clamped).
// A row runs on one to eight CTAs of a thread-block cluster (ctas_per_row).
struct SampleRowsParams {
  const float* logits;  // [n_rows, vocab]
  int n_rows, vocab;
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const float* min_p;
  const float* uniform;  // may be null when uniform_f64 is set
  int32_t* out;          // [n_rows]
  void* workspace;       // sample_rows_workspace_bytes(n_rows, vocab) bytes (0 today: may be null)
  size_t workspace_bytes;
  const double* uniform_f64 = nullptr;  // optional [n_rows]: used instead of `uniform` (the CPU's exact u)
  int* invalid_row_flag = nullptr;      // optional device int: set to 1 when a row holds NaN or no logit > -inf
  // CTAs (one thread-block cluster) per row, 1..8; 0: sample_rows_ctas_per_row's choice. It
  // changes only the order of the f64 sums (the ~1e-15 caveat above).
  int ctas_per_row = 0;
};
size_t sample_rows_workspace_bytes(int n_rows, int vocab);
// The CTAs per row a launch uses: `requested` when > 0, else as many (a power of two <= 8) as
// keep n_rows * ctas <= the SM count and >= 4096 logits per CTA (one row: 8 of the GPU's SMs).
int sample_rows_ctas_per_row(int n_rows, int vocab, int requested = 0);
void sample_rows(const SampleRowsParams& p, cudaStream_t s);

}  // namespace latentserve::cuda
