#include "io/safetensors.h"


#include "core/error.h"

namespace latentserve {

namespace {
constexpr uint64_t kLengthPrefixBytes = 8;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile st;
  st.file_ = MappedFile::open(path);
  const std::string file = path.string();
  const uint64_t file_size = st.file_.size();

  if (file_size < kLengthPrefixBytes)
    fail("{}: file is {} bytes, shorter than the 8-byte header length that starts a safetensors file", file,
         file_size);
  const uint64_t header_size = read_u64_le(st.file_.data());
  if (header_size == 0) fail("{}: header length is 0, expected a JSON object", file);
  if (header_size > kMaxHeaderBytes)
    fail("{}: header length {} bytes exceeds the limit of {} bytes", file, header_size, kMaxHeaderBytes);
  if (header_size > file_size - kLengthPrefixBytes)
    fail("{}: header length {} bytes runs past the end of the file ({} bytes, at most {} after the length)", file,
         header_size, file_size, file_size - kLengthPrefixBytes);

  const uint8_t* header_bytes = st.file_.data() + kLengthPrefixBytes;
  const uint8_t* data = header_bytes + header_size;
  const uint64_t data_size = file_size - kLengthPrefixBytes - header_size;
  SafetensorsHeader header = parse_safetensors_header(
      std::string_view(reinterpret_cast<const char*>(header_bytes), size_t(header_size)), data_size, file);

  st.metadata_ = std::move(header.metadata);
  st.tensors_.reserve(header.tensors.size());
  for (auto& entry : header.tensors) {
    const size_t element_size = dtype_size_bytes(entry.dtype);
    const uint64_t file_offset = kLengthPrefixBytes + header_size + entry.data_begin;
    // The mapping starts page aligned, so the file offset decides the alignment.
    if (entry.data_end > entry.data_begin && file_offset % element_size != 0)
      fail("{}: tensor '{}' ({}) starts at file offset {}, not a multiple of its {}-byte element size "
           "(was the header padded to 8 bytes?)",
           file, entry.name, dtype_name(entry.dtype), file_offset, element_size);
    SafetensorsTensor t;
    t.view = TensorView::contiguous(const_cast<uint8_t*>(data + entry.data_begin), entry.dtype,
                                    entry.shape.data(), int(entry.shape.size()));
    t.name = std::move(entry.name);
    t.dtype = entry.dtype;
    t.shape = std::move(entry.shape);
    t.data_begin = entry.data_begin;
    t.data_end = entry.data_end;
    st.index_of_.emplace(t.name, st.tensors_.size());
    st.tensors_.push_back(std::move(t));
  }
  return st;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_of_.find(std::string(name));
  return it == index_of_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) fail("{}: no tensor named '{}' ({} tensors in the file)", path().string(), name, tensors_.size());
  return t->view;
}

}  // namespace latentserve
