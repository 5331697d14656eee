#pragma once
// The read roof: how fast this GPU can stream device memory with 16-byte loads, one pass,
// nothing written back but one value per block (so the loads cannot be elided). Memory-bound
// kernels (decode attention) quote their bandwidth as a fraction of this measured roof
// rather than of the datasheet's peak. nvcc-safe header.
#include <cuda_runtime.h>

#include <cstddef>

namespace latentserve::cuda {

// data: device, 16-byte aligned, bytes a multiple of 16; block_sums: device [n_blocks_out] f32
// with n_blocks_out >= read_only_pass_blocks(). No host synchronisation.
void read_only_pass(const void* data, size_t bytes, float* block_sums, int n_blocks_out, cudaStream_t s);
// How many block_sums it writes (its grid size, from the current device's SM count).
int read_only_pass_blocks();

}  // namespace latentserve::cuda
