// GgufWriter: builds a GGUF v3 file from metadata and tensors held in memory.
//
// Used by tests (modified copies of reference models: another attention form, a missing tensor,
// a wrong shape) and by the model synthesizer. Metadata keeps insertion order; set() on an
// existing key replaces its value in place. Tensors are written in the order added, each at an
// offset aligned to `general.alignment` (32 unless the metadata says otherwise); tensor bytes
// must be exactly ggml_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3].
//
// Values are written in the type they carry (GgufValue::type), so metadata copied from a parsed
// file round-trips byte for byte. Arrays of arrays are not supported (Error(unsupported)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "core/gguf/gguf.h"
#include "io/reader.h"

namespace sluice::core {

class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  void set_u32(const std::string& key, uint32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void remove(const std::string& key);
  // Every metadata key of `file`, in file order.
  void copy_metadata(const GgufFile& file);

  // Error(invalid_argument) on a byte count that does not match the shape, or a duplicate name.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::vector<std::byte> data);
  void remove_tensor(const std::string& name);
  bool has_tensor(const std::string& name) const;

  // The serialized file.
  std::vector<std::byte> bytes() const;
  // Writes bytes() to path; Error(io_error) on failure.
  void write(const std::string& path) const;

 private:
  struct TensorEntry {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<std::byte> data;
  };
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<TensorEntry> tensors_;
};

// The stored bytes of one tensor of a parsed file.
std::vector<std::byte> read_tensor_bytes(io::Reader& reader, const GgufTensorInfo& info);

// Copies every metadata key and tensor of `file` (read through `reader`) into `writer`.
void copy_gguf(io::Reader& reader, const GgufFile& file, GgufWriter& writer);

}  // namespace sluice::core
