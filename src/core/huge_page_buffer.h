#pragma once
// A buffer of 2 MiB-aligned anonymous memory, advised for transparent huge pages.
// Streaming weights for decode from huge pages avoids a TLB miss every 4 KiB (measured
// in docs/cpu-kernels.md); the kernel falls back to small pages where THP is off.
#include <cstddef>

namespace latentserve {

class HugePageBuffer {
 public:
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&&) = delete;
  HugePageBuffer(const HugePageBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

}  // namespace latentserve
