// Writing a declared model as llama.cpp's gguf-split does with --split-max-size (the layout that
// io/split_set.h and core/gguf/gguf.h read back).
//
// Parts: tensors keep their declaration order; a new part starts when the next tensor (its size
// padded to 32 bytes, GGUF's default alignment) would push the current part's tensor data past
// `max_part_bytes`; metadata is not counted. A part always holds at least one tensor, so a tensor
// larger than the limit gets a part of its own. Part 1 holds every key of the model followed by
// split.no (u16, 0-based), split.tensors.count (i32) and split.count (u16), in that order (as
// gguf-split writes them); later parts hold only those three keys. Names:
// `<prefix>-00001-of-0000N.gguf`. Each part is written by GgufStreamWriter (bounded memory, front
// to back); `fill` sees the model's own StreamTensor (its declaration index and offsets), never
// the part's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf/gguf_stream_writer.h"

namespace sluice::core {

// Tensor indices (declaration order) of each part.
std::vector<std::vector<size_t>> plan_split(const std::vector<StreamTensor>& tensors, uint64_t max_part_bytes);

// The output prefix for -o PATH: PATH without a trailing ".gguf".
std::string split_prefix(const std::string& out_path);

// Writes every part; returns their paths. A failure removes the parts written so far.
// Throws Error(invalid_argument) when the plan would need more than 99999 parts.
std::vector<std::string> write_split(const GgufStreamWriter& model, const std::string& prefix,
                                     uint64_t max_part_bytes, const GgufStreamWriter::Fill& fill,
                                     const GgufStreamWriter::Progress& progress = {});

// "2G" = 2,000,000,000 bytes, "500M" = 500,000,000, as gguf-split reads --split-max-size (decimal
// M and G), plus K and a plain byte count. Throws Error(invalid_argument) naming `what`.
uint64_t parse_split_size(const std::string& text, const std::string& what = "--split-max-size");

}  // namespace sluice::core
