#include "core/huge_page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace latentserve {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

HugePageBuffer::HugePageBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  mapped_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot map {} bytes of memory: {}", mapped_, std::strerror(errno));
  madvise(p, mapped_, MADV_HUGEPAGE);  // advice only: ignored where THP is off
  data_ = static_cast<std::byte*>(p);
}

HugePageBuffer::~HugePageBuffer() {
  if (data_) munmap(data_, mapped_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept : data_(o.data_), size_(o.size_), mapped_(o.mapped_) {
  o.data_ = nullptr;
  o.size_ = o.mapped_ = 0;
}

}  // namespace latentserve
