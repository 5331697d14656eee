#pragma once
// MappedFile: a whole file mapped read-only into memory (mmap), unmapped on
// destruction. Moving it keeps the mapping where it is, so pointers into data()
// stay valid for as long as some MappedFile owns the mapping.
#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace latentserve {

class MappedFile {
 public:
  // Throws Error naming the file and the system's reason (errno text) when the file
  // cannot be opened, is not a regular file, or cannot be mapped.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The bytes are mapped PROT_READ: writing through data() faults.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // an empty file maps nothing: data() is null
  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap();

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace latentserve
