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
#include "io/reader.h"

namespace sluice::core {

using TensorCheck = std::function<bool(const GgufTensorInfo&, std::span<const std::byte>)>;

void read_checked(io::Reader& reader, const GgufTensorInfo& t, std::span<std::byte> dst, const TensorCheck& check);

}  // namespace sluice::core
