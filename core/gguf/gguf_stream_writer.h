// Streaming GGUF v3 writer: writes files of tens of GB at disk speed with bounded memory.
//
// Use: declare everything first, then stream the data once.
//   GgufStreamWriter w;
//   w.add_string("general.architecture", "deepseek2");
//   w.add_u32("deepseek2.block_count", 4);
//   w.add_tensor("token_embd.weight", GgmlType::Q2_K, {7168, 163840});   // ggml order: ne[0] first
//   w.write("out.gguf", fill);   // fill(tensor, offset, dst) produces the bytes of each tensor
//
// File layout (what core/gguf/gguf.h reads back):
//   "GGUF" | u32 3 | u64 n_tensors | u64 n_kv | kv records | tensor infos | zero padding to
//   `alignment` | tensor data, each tensor starting at an aligned offset, zero padded between.
// All tensor offsets are computed when the tensor is declared, so the header is final before the
// first data byte is produced and the file is written strictly front to back, never seeked.
//
// Memory and IO: the header and the data are produced into a ring of `n_buffers` page-aligned
// buffers of `chunk_bytes` each (default 3 x 16 MiB, rounded up to 4 KiB); a writer thread
// writes each buffer once it is completely full, through io::FileSink with O_DIRECT where the
// filesystem allows it (no page-cache copy: the kernel time of buffered writes is several times
// the generation time at 20 GB), while the caller's fill callback produces the next one. Peak
// memory is the header plus the ring, whatever the file size.
//
// Fill contract: fill(tensor, offset, dst) must write exactly dst.size() bytes: the tensor's
// bytes [offset, offset + dst.size()). Pieces are handed out in order, never overlap, cover the
// tensor exactly, and start and end on whole rows (ne[0] values) when a row fits in one buffer,
// else on whole blocks of the tensor's type. (A row that straddles two ring buffers is produced
// into a side buffer and copied, so the contract holds while every ring buffer is written full.) An exception thrown by fill aborts the write and
// propagates; the partial file is removed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_type.h"

namespace sluice::core {

struct StreamTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  uint64_t offset = 0;     // relative to the data section, aligned
  uint64_t n_bytes = 0;
  uint64_t row_bytes = 0;  // bytes of one ne[0] row
  size_t index = 0;        // declaration order
};

class GgufStreamWriter {
 public:
  using Fill = std::function<void(const StreamTensor& tensor, uint64_t offset, std::span<std::byte> dst)>;
  // Called after each buffer is handed to the writer thread and once at the end with done == total.
  using Progress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

  explicit GgufStreamWriter(uint32_t alignment = 32);

  // ---- metadata (kept in declaration order) ----
  void add_u8(std::string_view key, uint8_t v);
  void add_i8(std::string_view key, int8_t v);
  void add_u16(std::string_view key, uint16_t v);
  void add_i16(std::string_view key, int16_t v);
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_i64(std::string_view key, int64_t v);
  void add_f32(std::string_view key, float v);
  void add_f64(std::string_view key, double v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_string_array(std::string_view key, std::span<const std::string> values);
  void add_f32_array(std::string_view key, std::span<const float> values);
  void add_i32_array(std::string_view key, std::span<const int32_t> values);
  void add_u32_array(std::string_view key, std::span<const uint32_t> values);
  // Copies a raw array record (element type id from core/gguf/gguf.h's GgufValueType, `count`
  // elements whose little-endian bytes are `raw`), e.g. to copy an array from another file.
  void add_raw_array(std::string_view key, uint32_t elem_type, uint64_t count, std::span<const std::byte> raw);
  bool has_key(std::string_view key) const;
  // Copies every key record of `other`, in its order (general.alignment only when absent here).
  void add_keys_of(const GgufStreamWriter& other);
  uint32_t alignment() const { return alignment_; }

  // ---- tensors ----
  // ne in ggml order (ne[0] contiguous), 1 to 4 dims. Throws Error(invalid_argument) when
  // ne[0] is not a multiple of the type's block size, a dim is < 1, the name repeats or is
  // longer than 64 bytes (ggml's GGML_MAX_NAME), or the size overflows.
  const StreamTensor& add_tensor(std::string_view name, GgmlType type, std::initializer_list<int64_t> ne);
  const StreamTensor& add_tensor(std::string_view name, GgmlType type, std::span<const int64_t> ne);
  const std::vector<StreamTensor>& tensors() const { return tensors_; }

  // Sizes of what write() will produce.
  uint64_t header_bytes() const;      // up to and including the padding before the data
  uint64_t data_bytes() const { return data_size_; }
  uint64_t file_bytes() const { return header_bytes() + data_bytes(); }

  // Writes the file (replacing it). Throws Error(io_error) naming the path and the file offset
  // when the OS refuses, Error(invalid_argument) for a zero-sized ring.
  void write(const std::string& path, const Fill& fill, const Progress& progress = {},
             size_t chunk_bytes = 16u << 20, size_t n_buffers = 3) const;

 private:
  void begin_kv(std::string_view key, uint32_t type);
  void put_bytes(const void* p, size_t n);
  void put_string(std::string_view s);
  template <typename T> void put(T v) { put_bytes(&v, sizeof v); }

  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<std::byte> kv_bytes_;
  std::vector<std::string> keys_;
  std::vector<size_t> key_starts_;  // where each key's record starts in kv_bytes_
  std::vector<StreamTensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace sluice::core
