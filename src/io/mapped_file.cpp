#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace latentserve {

namespace {
// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path) {
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail("cannot open '{}' for reading: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail("cannot stat '{}': {}", path.string(), std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("'{}' is not a regular file", path.string());

  MappedFile file;
  file.path_ = path;
  file.size_ = size_t(st.st_size);
  if (file.size_ == 0) return file;  // mmap rejects length 0
  void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) fail("cannot mmap '{}' ({} bytes): {}", path.string(), file.size_, std::strerror(errno));
  file.data_ = static_cast<const uint8_t*>(p);
  return file;
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace latentserve
