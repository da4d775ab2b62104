#include "core/gguf/checked_read.h"

#include <string>

#include "common/error.h"

namespace sluice::core {

namespace {
[[noreturn]] void throw_mismatch(const GgufTensorInfo& t, const std::string& path) {
  throw Error(ErrorCode::corrupt_data, "tensor '" + t.name + "' (" + std::to_string(t.n_bytes) + " bytes at offset " +
                                           std::to_string(t.file_offset) + " of '" + path +
                                           "'): XXH3-64 differs from the index (sluice index) after one re-read");
}
}  // namespace

void read_checked(io::Reader& reader, const GgufTensorInfo& t, std::span<std::byte> dst, const TensorCheck& check) {
  reader.read_sync(t.file_offset, dst);
  if (!check || check(t, dst)) return;
  reader.read_sync(t.file_offset, dst);
  if (check(t, dst)) return;
  throw_mismatch(t, reader.path());
}

std::span<const std::byte> map_checked(const io::FileMapping& mapping, const std::string& path, const GgufTensorInfo& t,
                                       const TensorCheck& check) {
  const std::span<const std::byte> view = mapping.view(t.file_offset, t.n_bytes);
  if (view.empty()) return view;
  mapping.populate(view);
  if (!check || check(t, view)) return view;
  mapping.drop(view);
  mapping.populate(view);
  if (check(t, view)) return view;
  throw_mismatch(t, path);
}

}  // namespace sluice::core
