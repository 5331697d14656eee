#pragma once
// The read roof: how fast this GPU can stream device memory with 16-byte loads, one pass,
// nothing written back but one value per block (so the loads cannot be elided). Memory-bound
// kernels (decode attention) quote their bandwidth as a fraction of this measured roof
// rather than of the datasheet's peak. nvcc-safe header.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace latentserve::cuda {

// data: device, 16-byte aligned, bytes a multiple of 16; block_sums: device [n_blocks_out] f32
// with n_blocks_out >= read_only_pass_blocks(). No host synchronisation.
void read_only_pass(const void* data, size_t bytes, float* block_sums, int n_blocks_out, cudaStream_t s);
// How many block_sums it writes (its grid size, from the current device's SM count).
int read_only_pass_blocks();

// The decode attention's access pattern without its arithmetic: every K and V row of every
// sequence's context, read once through the block table by a grid of (chunk, KV head,
// sequence) blocks of 256 threads, 8 x 16-byte loads in flight per thread. The layout says
// where a (block, offset, head) row lives:
//   SlotMajor      KvLayout::SlotMajor (kv_cache_layout.h: the CPU cache's order)
//   BlockHeadMajor KvLayout::HeadMajor (each head's rows of a block contiguous, FlashInfer's HND page)
//   Contiguous     ((seq * n_head_kv + head) * context + token) * row_bytes          (no table:
//                  PyTorch SDPA's [batch, head, token, dim])
// So the three differ only in addresses: their times say what the layout costs the stream.
enum class PagedReadLayout { SlotMajor, BlockHeadMajor, Contiguous };
struct PagedReadProbe {
  const void* k = nullptr;               // pool of >= n_blocks * block_size * n_head_kv * row_bytes
  const void* v = nullptr;
  const int32_t* block_tables = nullptr;  // [n_seqs, context / block_size]
  int n_seqs = 0, context = 0, n_head_kv = 0, block_size = 16, row_bytes = 256, chunk_tokens = 1024;
  PagedReadLayout layout = PagedReadLayout::SlotMajor;
  float* block_sums = nullptr;           // [paged_read_pass_blocks(p)]
  // Dynamic shared memory each block reserves and never touches: a way to cap the blocks per
  // SM (e.g. 100 KB: two, as the decode kernel runs), so the probe can also say what a given
  // residency leaves of the stream. 0: no cap (up to 8 blocks of 256 threads per SM).
  int reserve_smem_bytes = 0;
};
int paged_read_pass_blocks(const PagedReadProbe& p);
void paged_read_pass(const PagedReadProbe& p, cudaStream_t s);

}  // namespace latentserve::cuda
