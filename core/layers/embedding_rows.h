// EmbeddingRows: a token embedding table's rows, from RAM or left in the file.
//
// A forward needs one row of token_embd per token. Under a budget a resident table holds its
// whole size for a few KiB per token: 193 MiB of the README's K2-shaped file (50257 x 7168 at
// Q4_K), about 0.6 GiB of Kimi K2's; the expert cache could hold those bytes instead. So when the
// output head is a tensor of its own (a tied head reads every row each token), a streaming run's
// loader leaves the table in the file (ArchLoadOptions::embeddings_from_file) and each row is read
// when a token needs it: a synchronous buffered read of row_bytes that drops its pages, into the
// session's staging row. The rows are the file's bytes either way, so the values are the same.
//
// Not while the run checks tensors against a shard index: the index digests whole tensors, so the
// table is read (and checked) at load as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/gguf/gguf.h"
#include "core/gguf/tensor.h"
#include "io/reader.h"

namespace sluice::core {

// A loader's decision: with `requested` and an output head of its own in `f`, token_embd stays
// in the file and `table` gets its type, shape and row size (no data); its tensor info then, else
// null (the loader plans the table like any tensor).
const GgufTensorInfo* embeddings_stay_in_file(const GgufFile& f, bool requested, Tensor* table);

class EmbeddingRows {
 public:
  EmbeddingRows() = default;
  // Rows of `table`, its data in RAM.
  explicit EmbeddingRows(const Tensor& table) : table_(table) {}
  // Rows of a table left in the file (`table`: type, shape and row size, no data) at
  // `file_offset` of the address space of `path` (any part of a split set). Throws
  // Error(io_error) naming the path when it cannot be opened.
  EmbeddingRows(const Tensor& table, const std::string& path, uint64_t file_offset);

  bool in_file() const { return file_ != nullptr; }
  // Bytes a session stages one row in: the table's row when it is in the file, else 0.
  size_t staging_bytes() const { return in_file() ? table_.row_bytes : 0; }

  // out[t * n_embd, (t + 1) * n_embd) = row tokens[t], dequantized as ggml_get_rows does.
  // `staging` holds at least staging_bytes(). Error(invalid_argument) for an id outside the
  // table's [0, n_vocab); Error(io_error) for a failed read.
  void dequantize(std::span<const int32_t> tokens, std::span<std::byte> staging, float* out) const;

 private:
  Tensor table_;
  std::unique_ptr<io::Reader> file_;  // set when the table stays in the file
  uint64_t offset_ = 0;
};

}  // namespace sluice::core
