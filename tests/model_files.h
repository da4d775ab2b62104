// Helpers that write modified copies of reference models (core/gguf/gguf_writer.h) for the model suites.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"
#include "io/pread_reader.h"
#include "kernels/quant.h"
#include "tests/float_compare.h"
#include "tests/model_reference.h"

namespace sluice::test {

// A parsed reference file and its reader, for building modified copies.
struct SourceModel {
  explicit SourceModel(const std::filesystem::path& path)
      : reader(path.string()), file(core::GgufFile::parse(reader)) {}
  io::PreadReader reader;
  core::GgufFile file;

  std::vector<std::byte> bytes(const std::string& name) {
    return core::read_tensor_bytes(reader, file.tensor(name));
  }
  // Tensor values as f32 (any type the kernels can dequantize).
  std::vector<float> floats(const std::string& name) {
    const core::GgufTensorInfo& t = file.tensor(name);
    const std::vector<std::byte> raw = bytes(name);
    std::vector<float> out(t.n_elements);
    const int64_t rows = static_cast<int64_t>(t.n_elements) / t.ne[0];
    for (int64_t r = 0; r < rows; ++r)
      kernels::dequantize_row(t.type, raw.data() + r * t.row_bytes, out.data() + r * t.ne[0], t.ne[0]);
    return out;
  }
  std::vector<int64_t> shape(const std::string& name) {
    const core::GgufTensorInfo& t = file.tensor(name);
    return {t.ne.begin(), t.ne.begin() + t.n_dims};
  }
};

inline std::vector<std::byte> to_type(GgmlType type, const std::vector<float>& v, int64_t row) {
  std::vector<std::byte> out(ggml_row_bytes(type, static_cast<uint64_t>(row)) * (v.size() / static_cast<size_t>(row)));
  const size_t rb = ggml_row_bytes(type, static_cast<uint64_t>(row));
  for (size_t r = 0; r < v.size() / static_cast<size_t>(row); ++r)
    kernels::quantize_row(type, v.data() + r * static_cast<size_t>(row), out.data() + r * rb, row);
  return out;
}

// Copies `src` into a writer, lets `edit` change it, writes it under a temp dir; returns the path.
inline std::filesystem::path write_modified(SourceModel& src, const std::string& name,
                                            const std::function<void(core::GgufWriter&)>& edit) {
  core::GgufWriter w;
  core::copy_gguf(src.reader, src.file, w);
  edit(w);
  const auto path = temp_dir("model") / (name + ".gguf");
  w.write(path.string());
  return path;
}

}  // namespace sluice::test
