#include "core/gguf/checked_read.h"

#include <string>

#include "common/error.h"

namespace sluice::core {

void read_checked(io::Reader& reader, const GgufTensorInfo& t, std::span<std::byte> dst, const TensorCheck& check) {
  reader.read_sync(t.file_offset, dst);
  if (!check || check(t, dst)) return;
  reader.read_sync(t.file_offset, dst);
  if (check(t, dst)) return;
  throw Error(ErrorCode::corrupt_data, "tensor '" + t.name + "' (" + std::to_string(t.n_bytes) + " bytes at offset " +
                                           std::to_string(t.file_offset) + " of '" + reader.path() +
                                           "'): XXH3-64 differs from the index (sluice index) after one re-read");
}

}  // namespace sluice::core
