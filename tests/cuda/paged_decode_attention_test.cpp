// paged_decode_attention against a scalar f64 reference that reads the same paged cache
// (shuffled, non-contiguous block tables; unused table entries -1), for MHA / GQA / MQA,
// head_dim 64 and 128, bf16 and FP8 (per-head and per-tensor scales) caches. Every test but the
// parameter checks runs for every compiled kernel variant (PagedDecodeKernel) and a few chunk
// plans (kVariants below), so a candidate passes exactly what the Base kernel passes.
//
// Tolerance: relative_l2 < 1e-2 (kBf16Tolerance). The kernel rounds P to bf16 (f16 for FP8)
// before P.V and the output to bf16 (relative 2^-9 each), so the expected error is ~3e-3; the
// FP8 reference dequantises the very codes the kernel reads, so quantisation is not in the error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/paged_decode_attention.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/fp8.h"
#include "cuda/gpu_test_util.h"

namespace latentserve {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;
using testing::from_bf16_bits;
using testing::poisoned_bf16;
using testing::poisoned_f32;
using testing::to_device;
using testing::to_host;

constexpr double kBf16Tolerance = 1e-2;

struct Variant {
  std::string label;
  cuda::PagedDecodeTuning tuning;
  cuda::KvLayout layout = cuda::KvLayout::SlotMajor;
};
std::vector<Variant> all_variants() {
  std::vector<Variant> v;
  for (int k = 0; k < int(cuda::PagedDecodeKernel::kCount); ++k) {
    cuda::PagedDecodeTuning t;
    t.kernel = cuda::PagedDecodeKernel(k);
    v.push_back({cuda::paged_decode_kernel_name(t.kernel), t});
  }
  // chunk plans: many small chunks (the fused merge over many partials), other CTA targets
  auto with = [](cuda::PagedDecodeKernel k, int target, int chunk, const char* label) {
    cuda::PagedDecodeTuning t;
    t.kernel = k;
    t.target_ctas = target;
    t.chunk_tokens = chunk;
    return Variant{label, t};
  };
  v.push_back(with(cuda::PagedDecodeKernel::Base, 0, 64, "base_chunk64"));
  v.push_back(with(cuda::PagedDecodeKernel::Fused, 0, 64, "fused_chunk64"));
  v.push_back(with(cuda::PagedDecodeKernel::FusedW8, 0, 128, "fused_w8_chunk128"));
  v.push_back(with(cuda::PagedDecodeKernel::Fused, 264, 0, "fused_ctas264"));
  v.push_back(with(cuda::PagedDecodeKernel::Fused, 1056, 0, "fused_ctas1056"));
  v.push_back(with(cuda::PagedDecodeKernel::FusedFp8Mixed, 0, 64, "fused_fp8mixed_chunk64"));
  // chunks sized from each sequence's length over the grid planned for the bound
  for (cuda::PagedDecodeKernel k : {cuda::PagedDecodeKernel::Base, cuda::PagedDecodeKernel::Fused}) {
    Variant from_lengths = with(k, 0, 0, "");
    from_lengths.tuning.chunks_from_lengths = true;
    from_lengths.label = std::string(cuda::paged_decode_kernel_name(k)) + "_lengths";
    v.push_back(from_lengths);
  }
  // stream-K: one CTA walks every (sequence, KV head) pair; a handful of CTAs whose
  // ranges start and end mid-pair; more CTAs asked for than there are tiles
  v.push_back(with(cuda::PagedDecodeKernel::StreamK, 1, 0, "streamk_ctas1"));
  v.push_back(with(cuda::PagedDecodeKernel::StreamK, 7, 0, "streamk_ctas7"));
  v.push_back(with(cuda::PagedDecodeKernel::StreamK, 1000, 0, "streamk_ctas1000"));
  // the head-major cache (each KV head's rows of a block contiguous) through every kind of producer
  for (Variant h : {v[size_t(cuda::PagedDecodeKernel::Base)], v[size_t(cuda::PagedDecodeKernel::Fused)],
                    v[size_t(cuda::PagedDecodeKernel::FusedFill3)], v[size_t(cuda::PagedDecodeKernel::FusedBulk)], with(cuda::PagedDecodeKernel::StreamK, 7, 0, "streamk_ctas7")}) {
    h.layout = cuda::KvLayout::HeadMajor;
    h.label += "_head_major";
    v.push_back(h);
  }
  return v;
}

struct Case {
  int n_head = 8, n_head_kv = 2, head_dim = 128, block_size = 16;
  std::vector<int> seq_lens;  // the lengths the cache holds data for
  int sliding_window = 0;
  int bound = 0;  // max_seq_len_bound; 0: max(seq_lens)
  bool fp8 = false;
  bool per_head_scale = true;
  uint32_t seed = 1;
  // bf16 only: K at position p of a sequence of length L scaled by 1 + key_ramp * p / L, so the
  // scores' spread grows along the context and the running max keeps rising, by small and by
  // large steps (both branches of the lazy softmax)
  float key_ramp = 0.f;

  std::string describe() const {
    std::ostringstream o;
    o << "n_head " << n_head << " n_head_kv " << n_head_kv << " head_dim " << head_dim << " block_size " << block_size
      << (fp8 ? (per_head_scale ? " fp8 per-head" : " fp8 per-tensor") : " bf16") << " window " << sliding_window
      << " bound " << bound << " seq_lens [";
    for (size_t i = 0; i < seq_lens.size(); ++i) o << (i ? " " : "") << seq_lens[i];
    o << "]";
    return o.str();
  }
};

// One paged cache on the host (the reference's view: dequantised f32) and on the device.
class PagedProblem {
 public:
  explicit PagedProblem(Case c, cuda::PagedDecodeTuning tuning = {}, cuda::KvLayout layout = cuda::KvLayout::SlotMajor)
      : c_(std::move(c)), tuning_(tuning), layout_(layout) {
    if (c_.bound == 0) c_.bound = std::max(1, *std::max_element(c_.seq_lens.begin(), c_.seq_lens.end()));
    std::mt19937 rng(c_.seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    const int n_seqs = int(c_.seq_lens.size()), bs = c_.block_size, hd = c_.head_dim, n_kv = c_.n_head_kv;
    const int longest = std::max(c_.bound, *std::max_element(c_.seq_lens.begin(), c_.seq_lens.end()));
    max_blocks_ = (longest + bs - 1) / bs + 1;  // one more than needed: trailing -1 entries

    // blocks handed out in a shuffled order from a pool with spare blocks, as a block pool would
    int used = 0;
    for (int len : c_.seq_lens) used += (len + bs - 1) / bs;
    n_blocks_ = used + 3;
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks_));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table_.assign(size_t(n_seqs) * max_blocks_, -1);
    int next = 0;
    for (int s = 0; s < n_seqs; ++s)
      for (int b = 0; b < (c_.seq_lens[size_t(s)] + bs - 1) / bs; ++b) table_[size_t(s) * max_blocks_ + b] = ids[size_t(next++)];

    // K, V: rows of head_dim in the layout's order (row_of)
    const size_t n_elem = size_t(n_blocks_) * bs * n_kv * hd;
    k_.resize(n_elem);
    v_.resize(n_elem);
    if (!c_.fp8) {
      std::vector<float> k_gain(size_t(n_blocks_) * bs, 1.f);  // per slot
      if (c_.key_ramp != 0.f)
        for (int s = 0; s < n_seqs; ++s)
          for (int pos = 0; pos < c_.seq_lens[size_t(s)]; ++pos)
            k_gain[size_t(table_[size_t(s) * max_blocks_ + pos / bs]) * bs + pos % bs] =
                1.f + c_.key_ramp * float(pos) / float(c_.seq_lens[size_t(s)]);
      std::vector<uint16_t> kb(n_elem), vb(n_elem);
      for (size_t slot = 0; slot < size_t(n_blocks_) * bs; ++slot)
        for (int h = 0; h < n_kv; ++h)
          for (int d = 0; d < hd; ++d) {
            const size_t i = row_of(slot, h) * hd + d;
            kb[i] = bf16::from_f32(k_gain[slot] * normal(rng)).bits;
            vb[i] = bf16::from_f32(normal(rng)).bits;
            k_[i] = bf16::from_bits(kb[i]).to_f32();
            v_[i] = bf16::from_bits(vb[i]).to_f32();
          }
      k_dev_ = to_device(kb);
      v_dev_ = to_device(vb);
    } else {
      // codes ~ N(0, 40^2) (well inside e4m3's +-448); heads of different magnitudes through
      // their power-of-two scales (per-tensor: one scale), so scores are peaked, not uniform
      std::vector<float> ks(static_cast<size_t>(n_kv)), vs(static_cast<size_t>(n_kv));
      for (int h = 0; h < n_kv; ++h) {
        ks[size_t(h)] = c_.per_head_scale ? std::ldexp(1.f, -6 + h % 3) : std::ldexp(1.f, -5);
        vs[size_t(h)] = c_.per_head_scale ? std::ldexp(1.f, -7 + h % 4) : std::ldexp(1.f, -6);
      }
      std::vector<uint8_t> kc(n_elem), vc(n_elem);
      for (size_t slot = 0; slot < size_t(n_blocks_) * bs; ++slot)
        for (int h = 0; h < n_kv; ++h)
          for (int d = 0; d < hd; ++d) {
            const size_t i = row_of(slot, h) * hd + d;
            kc[i] = f32_to_fp8_e4m3(40.f * normal(rng));
            vc[i] = f32_to_fp8_e4m3(40.f * normal(rng));
            k_[i] = fp8_e4m3_to_f32(kc[i]) * ks[size_t(h)];
            v_[i] = fp8_e4m3_to_f32(vc[i]) * vs[size_t(h)];
          }
      k_dev_ = to_device(kc);
      v_dev_ = to_device(vc);
      if (!c_.per_head_scale) {
        ks.resize(1);
        vs.resize(1);
      }
      k_scale_dev_ = to_device(ks);
      v_scale_dev_ = to_device(vs);
    }

    // q rows inside a wider fused-qkv row: stride (n_head + 2 n_head_kv) * head_dim
    q_stride_ = int64_t(c_.n_head + 2 * n_kv) * hd;
    std::vector<uint16_t> qb(size_t(n_seqs) * q_stride_);
    q_.resize(qb.size());
    for (size_t i = 0; i < qb.size(); ++i) {
      qb[i] = bf16::from_f32(1.5f * normal(rng)).bits;
      q_[i] = bf16::from_bits(qb[i]).to_f32();
    }
    q_dev_ = to_device(qb);
    table_dev_ = to_device(table_);
    set_lens(c_.seq_lens);
  }

  const Case& c() const { return c_; }
  const cuda::PagedDecodeTuning& tuning() const { return tuning_; }
  cuda::KvLayout layout() const { return layout_; }
  // The row of (slot, KV head) in the cache arrays: written out here, not taken from the
  // library, so a wrong kv_row_index cannot agree with itself.
  size_t row_of(size_t slot, int head) const {
    const size_t block = slot / size_t(c_.block_size), offset = slot % size_t(c_.block_size);
    return layout_ == cuda::KvLayout::SlotMajor ? slot * c_.n_head_kv + size_t(head)
                                                : (block * c_.n_head_kv + size_t(head)) * c_.block_size + offset;
  }
  int n_seqs() const { return int(c_.seq_lens.size()); }
  size_t out_elements() const { return size_t(n_seqs()) * c_.n_head * c_.head_dim; }

  // The lengths the next run uses (<= the lengths the cache holds data for): a new device buffer.
  void set_lens(const std::vector<int>& lens) {
    run_lens_ = lens;
    lens_dev_ = to_device(lens);
  }
  // Only the reference's lengths (the caller rewrote the device buffer itself).
  void set_reference_lens(const std::vector<int>& lens) { run_lens_ = lens; }

  cuda::PagedDecodeParams params(void* out, const DeviceBuffer& workspace) const {
    cuda::PagedDecodeParams p{};
    p.q = q_dev_.data();
    p.q_seq_stride = q_stride_;
    p.kv.k = k_dev_.data();
    p.kv.v = v_dev_.data();
    p.kv.dtype = c_.fp8 ? KvDtype::Fp8E4M3 : KvDtype::Bf16;
    p.kv.layout = layout_;
    p.kv.block_size = c_.block_size;
    if (c_.fp8) {
      p.kv.k_scale = k_scale_dev_.as<float>();
      p.kv.v_scale = v_scale_dev_.as<float>();
      p.kv.scale_head_stride = c_.per_head_scale ? 1 : 0;
    }
    p.out = out;
    p.seq_lens = lens_dev_.as<int32_t>();
    p.block_tables = table_dev_.as<int32_t>();
    p.n_seqs = n_seqs();
    p.max_blocks_per_seq = max_blocks_;
    p.block_size = c_.block_size;
    p.n_head = c_.n_head;
    p.n_head_kv = c_.n_head_kv;
    p.head_dim = c_.head_dim;
    p.softmax_scale = 1.f / std::sqrt(float(c_.head_dim));
    p.sliding_window = c_.sliding_window;
    p.max_seq_len_bound = c_.bound;
    p.workspace = workspace.data();
    p.workspace_bytes = workspace.bytes();
    p.tuning = tuning_;
    return p;
  }

  // NaN partials (those the merge reads must all have been written), zeroed fused-merge counters.
  DeviceBuffer make_workspace() const {
    const size_t bytes = cuda::paged_decode_workspace_bytes(n_seqs(), c_.n_head, c_.head_dim, c_.bound, tuning_);
    DeviceBuffer ws = poisoned_f32(bytes / sizeof(float));
    cuda::paged_decode_workspace_init(ws.data(), ws.bytes(), n_seqs(), c_.n_head, nullptr);
    LS_CUDA_CHECK(cudaDeviceSynchronize());
    return ws;
  }

  // out: [n_seqs, n_head, head_dim], f64 over the dequantised cache, reading through the table.
  std::vector<double> reference() const {
    const int hd = c_.head_dim, group = c_.n_head / c_.n_head_kv, bs = c_.block_size;
    const double scale = 1.0 / std::sqrt(double(hd));
    std::vector<double> out(out_elements(), 0.0), w;
    for (int s = 0; s < n_seqs(); ++s) {
      const int len = run_lens_[size_t(s)];
      if (len == 0) continue;  // padded row: zeros
      const int first = c_.sliding_window > 0 ? std::max(0, len - c_.sliding_window) : 0;
      w.assign(size_t(len), 0.0);
      for (int qh = 0; qh < c_.n_head; ++qh) {
        const int kvh = qh / group;
        const float* q = q_.data() + size_t(s) * q_stride_ + size_t(qh) * hd;
        double max_score = -INFINITY;
        for (int pos = first; pos < len; ++pos) {
          const size_t slot = size_t(table_[size_t(s) * max_blocks_ + pos / bs]) * bs + pos % bs;
          const float* k = k_.data() + row_of(slot, kvh) * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(q[d]) * double(k[d]);
          w[size_t(pos)] = dot * scale;
          max_score = std::max(max_score, w[size_t(pos)]);
        }
        double total = 0;
        for (int pos = first; pos < len; ++pos) total += (w[size_t(pos)] = std::exp(w[size_t(pos)] - max_score));
        double* o = out.data() + (size_t(s) * c_.n_head + qh) * hd;
        for (int pos = first; pos < len; ++pos) {
          const size_t slot = size_t(table_[size_t(s) * max_blocks_ + pos / bs]) * bs + pos % bs;
          const float* v = v_.data() + row_of(slot, kvh) * hd;
          for (int d = 0; d < hd; ++d) o[d] += w[size_t(pos)] * double(v[d]);
        }
        for (int d = 0; d < hd; ++d) o[d] /= total;
      }
    }
    return out;
  }

  // Launches on a NaN-poisoned output and workspace; returns the output.
  std::vector<float> run(cudaStream_t stream) const {
    DeviceBuffer out = poisoned_bf16(out_elements());
    DeviceBuffer ws = make_workspace();
    cuda::paged_decode_attention(params(out.data(), ws), stream);
    LS_CUDA_CHECK(cudaStreamSynchronize(stream));
    return from_bf16_bits(to_host<uint16_t>(out, out_elements()));
  }

  const std::vector<int>& run_lens() const { return run_lens_; }

 private:
  Case c_;
  cuda::PagedDecodeTuning tuning_;
  cuda::KvLayout layout_;
  int max_blocks_ = 0, n_blocks_ = 0;
  int64_t q_stride_ = 0;
  std::vector<int32_t> table_;
  std::vector<float> q_, k_, v_;
  std::vector<int> run_lens_;
  DeviceBuffer q_dev_, k_dev_, v_dev_, k_scale_dev_, v_scale_dev_, table_dev_, lens_dev_;
};

// relative_l2 over the whole output, plus: every element finite, padded rows exactly zero.
// Failure messages name the shape, the plan, the worst element and the first bad one.
void expect_matches(const PagedProblem& problem, const std::vector<float>& got, const std::vector<double>& want,
                    double tolerance = kBf16Tolerance) {
  const Case& c = problem.c();
  const int hd = c.head_dim;
  const cuda::PagedDecodePlan plan = cuda::paged_decode_plan(
      problem.n_seqs(), c.n_head, c.n_head_kv, hd, c.fp8 ? KvDtype::Fp8E4M3 : KvDtype::Bf16, c.bound, problem.tuning());
  std::ostringstream where;
  where << c.describe() << (problem.layout() == cuda::KvLayout::HeadMajor ? " head-major" : "") << " (kernel " << cuda::paged_decode_kernel_name(problem.tuning().kernel) << ", plan: chunk "
        << plan.chunk_tokens << " tokens at the bound"
        << (plan.length_chunk_min > 0 ? ", sized from each length" : "") << ", " << plan.n_splits << " splits, "
        << plan.n_ctas << " CTAs, "
        << plan.threads << " threads, " << plan.stages << " stages)";
  size_t first_bad = got.size(), worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int s = int(i / (size_t(c.n_head) * hd));
    const bool padded = problem.run_lens()[size_t(s)] == 0;
    const double err = std::abs(double(got[i]) - want[i]);
    if (!std::isfinite(got[i]) || (padded && got[i] != 0.f)) first_bad = std::min(first_bad, i);
    if (std::isfinite(err) && err > worst_err) worst_err = err, worst = i;
  }
  auto index = [&](size_t i) {
    std::ostringstream o;
    o << "[seq " << i / (size_t(c.n_head) * hd) << ", head " << (i / hd) % c.n_head << ", dim " << i % hd << "]";
    return o.str();
  };
  EXPECT_EQ(first_bad, got.size()) << where.str() << ": first non-finite (or non-zero padded) element at "
                                   << index(first_bad < got.size() ? first_bad : 0) << " = "
                                   << (first_bad < got.size() ? got[first_bad] : 0.f);
  const double rel = testing::relative_l2(got, want);
  EXPECT_LT(rel, tolerance) << where.str() << ": relative_l2 " << rel << ", max |err| " << worst_err << " at "
                            << index(worst) << " (got " << got[worst] << ", want " << want[worst] << ")";
}

void check_case(const Case& c, cudaStream_t stream, const cuda::PagedDecodeTuning& tuning, cuda::KvLayout layout) {
  SCOPED_TRACE(c.describe());
  PagedProblem problem(c, tuning, layout);
  expect_matches(problem, problem.run(stream), problem.reference());
}

class PagedDecodeAttention : public ::testing::TestWithParam<Variant> {
 protected:
  const cuda::PagedDecodeTuning& tuning() const { return GetParam().tuning; }
  cuda::KvLayout layout() const { return GetParam().layout; }
  void check_case(const Case& c, cudaStream_t stream) const { latentserve::check_case(c, stream, tuning(), layout()); }
};

TEST_P(PagedDecodeAttention, Bf16ShapesMatchReference) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  const std::pair<int, int> heads[] = {{8, 8}, {8, 2}, {8, 1}, {12, 4}, {32, 8}, {32, 1}, {64, 1}};
  uint32_t seed = 10;
  for (auto [n_head, n_kv] : heads)
    for (int hd : {64, 128})
      for (int bs : {16, 64}) {
        Case c;
        c.n_head = n_head;
        c.n_head_kv = n_kv;
        c.head_dim = hd;
        c.block_size = bs;
        c.seq_lens = {1, 17, 3 * bs, 0, 200, 64, 513};  // ragged, block multiples, a padded row
        c.seed = seed++;
        check_case(c, device.stream());
      }
}

TEST_P(PagedDecodeAttention, BlockSizes8To256) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  for (int bs : {8, 32, 128, 256}) {
    Case c;
    c.n_head = 16;
    c.n_head_kv = 4;
    c.block_size = bs;
    c.seq_lens = {bs - 1, bs, bs + 1, 700};
    c.seed = 40 + uint32_t(bs);
    check_case(c, device.stream());
  }
}

// Keys whose spread grows 9x along the context: the running max of each row rises tile after
// tile, sometimes by less than the lazy softmax's threshold (it keeps a stale reference max and
// p > 1) and sometimes by more (it rescales), in long chunks and across the merge.
TEST_P(PagedDecodeAttention, RisingScoresAlongTheContext) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  for (auto [n_head, n_kv] : {std::pair{32, 8}, std::pair{8, 8}, std::pair{32, 1}}) {
    Case c;
    c.n_head = n_head;
    c.n_head_kv = n_kv;
    c.seq_lens = {4100, 1023, 77, 2048};
    c.key_ramp = 8.f;
    c.seed = 90 + uint32_t(n_kv);
    check_case(c, device.stream());
  }
}

// Whether a stream-K launch cuts some (sequence, KV head) pair between CTAs: its ranges are
// ceil(tiles / n_ctas) tiles of the pairs laid end to end (sequence-major), as the kernel takes them.
bool streamk_splits_a_pair(const Case& c, const cuda::PagedDecodePlan& plan) {
  std::vector<int64_t> pair_starts;
  int64_t tiles = 0;
  for (int len : c.seq_lens)
    for (int h = 0; h < c.n_head_kv; ++h) {
      pair_starts.push_back(tiles);
      tiles += (len + plan.tile_keys - 1) / plan.tile_keys;
    }
  const int64_t per_cta = (tiles + plan.n_ctas - 1) / plan.n_ctas;
  for (int64_t cut = per_cta; cut < tiles; cut += per_cta)
    if (!std::binary_search(pair_starts.begin(), pair_starts.end(), cut)) return true;
  return false;
}

TEST_P(PagedDecodeAttention, LongContextsMergeManySplits) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case gqa;
  gqa.n_head = 32;
  gqa.n_head_kv = 8;
  gqa.seq_lens = {3001, 5000, 64, 4096};
  gqa.seed = 3;
  Case mqa;
  mqa.n_head = 8;
  mqa.n_head_kv = 1;
  mqa.head_dim = 64;
  mqa.block_size = 32;
  mqa.seq_lens = {3500, 1};
  mqa.seed = 4;
  for (const Case& c : {gqa, mqa}) {
    const auto plan = cuda::paged_decode_plan(int(c.seq_lens.size()), c.n_head, c.n_head_kv, c.head_dim, KvDtype::Bf16,
                                              *std::max_element(c.seq_lens.begin(), c.seq_lens.end()), tuning());
    if (plan.stream_k) {  // stream-K merges where a pair's tiles span CTAs (one CTA: none to merge)
      if (plan.n_ctas > 1) {
        EXPECT_TRUE(streamk_splits_a_pair(c, plan)) << c.describe() << ": the test must exercise the merge";
      }
    } else {
      EXPECT_GT(plan.n_splits, 2) << c.describe() << ": the test must exercise the merge";
    }
    check_case(c, device.stream());
  }
}

TEST_P(PagedDecodeAttention, PaddedRowsAreZero) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case c;
  c.seq_lens = {0, 5, 0, 130, 0};
  c.seed = 5;
  check_case(c, device.stream());  // expect_matches requires padded rows to be exactly 0
}

TEST_P(PagedDecodeAttention, SlidingWindow) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  for (int window : {1, 100, 1000}) {
    Case a;
    a.n_head = 8;
    a.n_head_kv = 2;
    a.sliding_window = window;
    a.seq_lens = {50, 100, 101, 3000, 1};
    a.seed = 60 + uint32_t(window);
    Case b = a;
    b.n_head = 32;
    b.n_head_kv = 1;
    b.head_dim = 64;
    b.block_size = 64;
    b.seed += 1;
    check_case(a, device.stream());
    check_case(b, device.stream());
  }
}

TEST_P(PagedDecodeAttention, Fp8PerHeadAndPerTensorScales) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  const std::pair<int, int> heads[] = {{8, 8}, {8, 2}, {32, 8}, {32, 1}, {64, 1}};
  uint32_t seed = 70;
  for (bool per_head : {true, false})
    for (auto [n_head, n_kv] : heads)
      for (int hd : {64, 128}) {
        Case c;
        c.n_head = n_head;
        c.n_head_kv = n_kv;
        c.head_dim = hd;
        c.block_size = hd == 64 ? 64 : 16;
        c.fp8 = true;
        c.per_head_scale = per_head;
        c.seq_lens = {1, 17, 0, 64, 1500};
        c.seed = seed++;
        check_case(c, device.stream());
      }
}

TEST_P(PagedDecodeAttention, LargerBoundGivesTheSameResult) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case tight;
  tight.n_head = 32;
  tight.n_head_kv = 8;
  tight.seq_lens = {700, 33, 1200};
  tight.seed = 8;
  Case loose = tight;
  loose.bound = 4 * 1200 + 100;  // more (and differently sized) splits: most of them empty, or (_lengths) shorter
  PagedProblem a(tight, tuning(), layout()), b(loose, tuning(), layout());  // same seed: same cache contents and table
  const std::vector<float> out_a = a.run(device.stream()), out_b = b.run(device.stream());
  const std::vector<double> want = a.reference();
  expect_matches(a, out_a, want);
  expect_matches(b, out_b, want);
  std::vector<double> out_a64(out_a.begin(), out_a.end());
  // both round the same f32 result to bf16; only the split order differs
  EXPECT_LT(testing::relative_l2(out_b, out_a64), 4e-3) << "bound " << tight.bound << " vs " << loose.bound;
}

// The grid is planned for the bound; lengths from 1 to the bound (tile edges, just past half of
// it, the bound itself), with and without a window, each split into the grid's chunks.
TEST_P(PagedDecodeAttention, LengthsFarBelowTheBound) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  uint32_t seed = 90;
  for (int window : {0, 700})
    for (auto [n_head, n_kv] : {std::pair{32, 8}, std::pair{32, 1}}) {
      Case c;
      c.n_head = n_head;
      c.n_head_kv = n_kv;
      c.block_size = 32;
      c.sliding_window = window;
      c.bound = 4096;
      c.seq_lens = {1, 63, 65, 1000, 2049, 4096};
      c.seed = seed++;
      check_case(c, device.stream());
    }
}

TEST_P(PagedDecodeAttention, CapturedGraphStaysValidAsLengthsGrow) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  cudaStream_t stream = device.stream();
  Case c;
  c.n_head = 16;
  c.n_head_kv = 2;
  c.seq_lens = {1500, 2048, 900};  // the cache holds the final lengths
  c.bound = 2048;
  c.seed = 9;
  PagedProblem problem(c, tuning(), layout());
  problem.set_lens({100, 700, 0});
  DeviceBuffer out = poisoned_bf16(problem.out_elements());
  DeviceBuffer ws = problem.make_workspace();
  const cuda::PagedDecodeParams p = problem.params(out.data(), ws);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cuda::paged_decode_attention(p, stream);  // must not synchronise (capture would fail)
  LS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (const std::vector<int>& lens : {std::vector<int>{100, 700, 0}, std::vector<int>{1500, 2048, 900}}) {
    SCOPED_TRACE(::testing::Message() << "lens " << lens[0] << " " << lens[1] << " " << lens[2]);
    // same device buffer, new contents: the captured graph reads it at replay
    LS_CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(p.seq_lens), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    problem.set_reference_lens(lens);
    LS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LS_CUDA_CHECK(cudaStreamSynchronize(stream));
    expect_matches(problem, from_bf16_bits(to_host<uint16_t>(out, problem.out_elements())), problem.reference());
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_P(PagedDecodeAttention, LengthsBeyondTheBoundGiveNaN) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case c;
  c.seq_lens = {300, 40};
  c.bound = 256;  // smaller than seq_lens[0]: that row must be NaN, not a truncated context
  PagedProblem problem(c, tuning(), layout());
  const std::vector<float> out = problem.run(device.stream());
  const size_t row = size_t(c.n_head) * c.head_dim;
  EXPECT_TRUE(std::all_of(out.begin(), out.begin() + row, [](float x) { return std::isnan(x); }));
  EXPECT_TRUE(std::all_of(out.begin() + row, out.end(), [](float x) { return std::isfinite(x); }));
}

// One workspace and output, several launches with different lengths (and so different live
// chunk counts): the fused variants' counters must come back to zero after every launch.
TEST_P(PagedDecodeAttention, RepeatedLaunchesShareOneWorkspace) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case c;
  c.n_head = 32;
  c.n_head_kv = 4;
  c.seq_lens = {2500, 1100, 40, 3000};
  c.seed = 12;
  PagedProblem problem(c, tuning(), layout());
  DeviceBuffer out = poisoned_bf16(problem.out_elements());
  DeviceBuffer ws = problem.make_workspace();
  for (const std::vector<int>& lens : {std::vector<int>{2500, 1100, 40, 3000}, std::vector<int>{65, 1, 0, 1500},
                                       std::vector<int>{2500, 1100, 40, 3000}}) {
    SCOPED_TRACE(::testing::Message() << "lens " << lens[0] << " " << lens[1] << " " << lens[2] << " " << lens[3]);
    problem.set_lens(lens);
    cuda::paged_decode_attention(problem.params(out.data(), ws), device.stream());
    LS_CUDA_CHECK(cudaStreamSynchronize(device.stream()));
    expect_matches(problem, from_bf16_bits(to_host<uint16_t>(out, problem.out_elements())), problem.reference());
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, PagedDecodeAttention, ::testing::ValuesIn(all_variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.label; });

TEST(PagedDecodeAttentionTuning, InvalidTuningThrows) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case c;
  c.seq_lens = {10, 20};
  PagedProblem problem(c);
  DeviceBuffer out = poisoned_bf16(problem.out_elements());
  DeviceBuffer ws = problem.make_workspace();
  const cuda::PagedDecodeParams good = problem.params(out.data(), ws);
  auto expect_throw = [&](const char* what, auto mutate) {
    cuda::PagedDecodeParams p = good;
    mutate(p);
    EXPECT_THROW(cuda::paged_decode_attention(p, device.stream()), Error) << what;
  };
  expect_throw("kernel out of range", [](auto& p) { p.tuning.kernel = cuda::PagedDecodeKernel::kCount; });
  expect_throw("chunk not a tile multiple", [](auto& p) { p.tuning.chunk_tokens = 96; });
  expect_throw("chunk > 1024", [](auto& p) { p.tuning.chunk_tokens = 2048; });
  expect_throw("W8 chunk 64 at group 4 (tile 128)", [](auto& p) {
    p.tuning.kernel = cuda::PagedDecodeKernel::FusedW8;
    p.tuning.chunk_tokens = 64;
  });
  expect_throw("negative target", [](auto& p) { p.tuning.target_ctas = -1; });
  expect_throw("fixed chunk with chunks from lengths", [](auto& p) {
    p.tuning.chunk_tokens = 128;
    p.tuning.chunks_from_lengths = true;
  });
  expect_throw("fused without room for counters", [&](auto& p) {
    p.tuning.kernel = cuda::PagedDecodeKernel::Fused;
    p.workspace_bytes = cuda::paged_decode_plan(2, c.n_head, c.n_head_kv, c.head_dim, KvDtype::Bf16, 20).workspace_bytes;
  });
  LS_CUDA_CHECK(cudaStreamSynchronize(device.stream()));
}

// Every variant's workspace bound covers its plan at every batch and bound up to the sized ones,
// and is monotone (host arithmetic only).
TEST(PagedDecodeAttentionTuning, WorkspaceBoundCoversEveryPlan) {
  for (const Variant& v : all_variants()) {
    const size_t big = cuda::paged_decode_workspace_bytes(64, 32, 128, 16384, v.tuning);
    for (int n_kv : {1, 4, 32})
      for (KvDtype dtype : {KvDtype::Bf16, KvDtype::Fp8E4M3})
        for (int n : {1, 3, 16, 64})
          for (int bound : {1, 100, 4096, 9000, 16384}) {
            const auto plan = cuda::paged_decode_plan(n, 32, n_kv, 128, dtype, bound, v.tuning);
            const size_t bytes = cuda::paged_decode_workspace_bytes(n, 32, 128, bound, v.tuning);
            EXPECT_LE(plan.workspace_bytes, bytes) << v.label << " n " << n << " bound " << bound << " n_kv " << n_kv;
            EXPECT_LE(bytes, big) << v.label << " not monotone at n " << n << " bound " << bound;
          }
  }
}

// The decode graphs' context buckets (host arithmetic only): at least the length and 512, a
// bucket of its own, monotone, steps_per_octave of them in each doubling, and within
// (steps + 1) / steps of the length (a power-of-two grid could be 2x the length).
TEST(PagedDecodeAttentionTuning, ContextBucketsStepsPerOctave) {
  for (int steps : {1, 2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "steps per octave " << steps);
    int64_t previous = 0;
    int in_octave = 0;
    for (int64_t len = 1; len <= 70000; ++len) {
      const int64_t b = cuda::decode_context_bucket(len, steps);
      ASSERT_GE(b, std::max<int64_t>(len, 512)) << "len " << len;
      ASSERT_GE(b, previous) << "len " << len;
      ASSERT_EQ(cuda::decode_context_bucket(b, steps), b) << "len " << len;
      if (len > 512) {
        ASSERT_LE(b * steps, len * (steps + 1)) << "len " << len << " bucket " << b;
      }
      if (steps == 1) {
        ASSERT_EQ(b & (b - 1), 0) << "len " << len;
      }
      if (b != previous && b >= 1024 && b < 2048) ++in_octave;
      previous = b;
    }
    EXPECT_EQ(in_octave, steps);
  }
  // By hand from the definition (m * 2^e, m in [4, 8)): 640 = 5 * 128, 1280 = 5 * 256, 40960 = 5 * 8192.
  EXPECT_EQ(cuda::decode_context_bucket(513, 4), 640);
  EXPECT_EQ(cuda::decode_context_bucket(1031, 4), 1280);
  EXPECT_EQ(cuda::decode_context_bucket(1537, 4), 1792);
  EXPECT_EQ(cuda::decode_context_bucket(32781, 4), 40960);
  EXPECT_EQ(cuda::decode_context_bucket(32781, 1), 65536);
  EXPECT_THROW(cuda::decode_context_bucket(1000, 0), Error);
  EXPECT_THROW(cuda::decode_context_bucket(1000, cuda::kDecodeContextBucketsMaxSteps + 1), Error);
}

TEST(PagedDecodeAttention, InvalidParamsThrow) {
  LS_REQUIRE_GPU();
  cuda::CudaDevice device;
  Case c;
  c.seq_lens = {10, 20};
  PagedProblem problem(c);
  DeviceBuffer out = poisoned_bf16(problem.out_elements());
  DeviceBuffer ws = problem.make_workspace();
  const cuda::PagedDecodeParams good = problem.params(out.data(), ws);
  EXPECT_NO_THROW(cuda::paged_decode_attention(good, device.stream()));
  LS_CUDA_CHECK(cudaStreamSynchronize(device.stream()));

  auto expect_throw = [&](const char* what, auto mutate) {
    cuda::PagedDecodeParams p = good;
    mutate(p);
    EXPECT_THROW(cuda::paged_decode_attention(p, device.stream()), Error) << what;
  };
  expect_throw("head_dim 96", [](auto& p) { p.head_dim = 96; });
  expect_throw("n_head % n_head_kv", [](auto& p) { p.n_head_kv = 3; });
  expect_throw("group > 64", [](auto& p) { p.n_head = 128, p.n_head_kv = 1, p.q_seq_stride = 128 * 128; });
  expect_throw("null q", [](auto& p) { p.q = nullptr; });
  expect_throw("null out", [](auto& p) { p.out = nullptr; });
  expect_throw("null k", [](auto& p) { p.kv.k = nullptr; });
  expect_throw("null v", [](auto& p) { p.kv.v = nullptr; });
  expect_throw("null seq_lens", [](auto& p) { p.seq_lens = nullptr; });
  expect_throw("null block_tables", [](auto& p) { p.block_tables = nullptr; });
  expect_throw("null workspace", [](auto& p) { p.workspace = nullptr; });
  expect_throw("workspace too small", [](auto& p) { p.workspace_bytes = 16; });
  expect_throw("block_size 12", [](auto& p) { p.block_size = 12; });
  expect_throw("block_size 512", [](auto& p) { p.block_size = 512; });
  expect_throw("kv.block_size 32 against block_size 16", [](auto& p) { p.kv.block_size = 2 * p.block_size; });
  expect_throw("q_seq_stride too small", [](auto& p) { p.q_seq_stride = p.n_head * p.head_dim - 8; });
  expect_throw("max_seq_len_bound 0", [](auto& p) { p.max_seq_len_bound = 0; });
  expect_throw("softmax_scale 0", [](auto& p) { p.softmax_scale = 0; });
  expect_throw("negative window", [](auto& p) { p.sliding_window = -1; });
  expect_throw("fp8 without scales", [](auto& p) { p.kv.dtype = KvDtype::Fp8E4M3; });
  expect_throw("misaligned q", [](auto& p) { p.q = static_cast<const char*>(p.q) + 2; });
  try {
    cuda::PagedDecodeParams p = good;
    p.head_dim = 96;
    cuda::paged_decode_attention(p, device.stream());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("96"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace latentserve
