// read_checked: one tensor's file bytes read into place and shown to a landing check (the shard
// index's digests, core/engine.cpp) before anything uses them, for every architecture's loader.
//
// A check that fails is given one re-read (the first copy may have been hit in transit); failing
// again is Error(corrupt_data) naming the tensor, its size and offset and the file. No check: a
// plain read.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "core/gguf/gguf.h"
#include "io/file_mapping.h"
#include "io/reader.h"

namespace sluice::core {

using TensorCheck = std::function<bool(const GgufTensorInfo&, std::span<const std::byte>)>;

void read_checked(io::Reader& reader, const GgufTensorInfo& t, std::span<std::byte> dst, const TensorCheck& check);

// The same for a tensor used in place in a file mapping (io/file_mapping.h): its view, populated
// and shown to the check; a failed check drops the pages and reads them once more. An empty span
// when the tensor is not inside one mapped file (the caller reads it instead).
// Whether map_checked can use tensor `t` in place: a mapping, the tensor inside one of its files,
// at a file offset that keeps `min_align` (a view's address has the file offset's alignment).
inline bool mappable(const io::FileMapping* mapping, const GgufTensorInfo& t, uint64_t min_align) {
  return mapping && t.file_offset % min_align == 0 && !mapping->view(t.file_offset, t.n_bytes).empty();
}
std::span<const std::byte> map_checked(const io::FileMapping& mapping, const std::string& path, const GgufTensorInfo& t,
                                       const TensorCheck& check);

}  // namespace sluice::core
