#include "cache/shard_layout.h"

#include <algorithm>

#include <xxhash.h>

#include "common/error.h"
#include "common/units.h"

namespace sluice::cache {
namespace {

uint64_t align_up(uint64_t v) { return (v + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment; }

}  // namespace

void validate_layout(const ShardLayout& layout, uint64_t file_size) {
  if (layout.n_expert == 0 || layout.layers.empty()) {
    throw Error(ErrorCode::invalid_argument, "shard layout has " + std::to_string(layout.layers.size()) +
                                                 " layers and " + std::to_string(layout.n_expert) + " experts");
  }
  if (layout.n_expert_used == 0 || layout.n_expert_used > layout.n_expert) {
    throw Error(ErrorCode::invalid_argument, "shard layout: n_expert_used " + std::to_string(layout.n_expert_used) +
                                                 " must be in 1.." + std::to_string(layout.n_expert));
  }
  for (uint32_t l = 0; l < layout.n_layer(); ++l) {
    const auto& tensors = layout.layers[l].tensors;
    if (tensors.empty() || tensors.size() > 0xffff) {
      throw Error(ErrorCode::invalid_argument, "shard layout: layer " + std::to_string(l) + " has " +
                                                   std::to_string(tensors.size()) + " expert tensors");
    }
    uint64_t total = 0;
    for (const TensorSlice& t : tensors) {
      if (t.expert_bytes == 0) {
        throw Error(ErrorCode::invalid_file, "tensor '" + t.name + "' has an empty expert slice");
      }
      uint64_t last = checked_mul(t.expert_stride, layout.n_expert - 1, "tensor '" + t.name + "' expert stride");
      uint64_t end = checked_add(checked_add(t.file_offset, last, t.name), t.expert_bytes, t.name);
      if (end > file_size) {
        throw Error(ErrorCode::invalid_file, "tensor '" + t.name + "' expert " + std::to_string(layout.n_expert - 1) +
                                                 " ends at " + human_bytes(end) + " (offset " + std::to_string(end) +
                                                 "), past end of file (" + human_bytes(file_size) + ")");
      }
      if (!t.digests.empty() && t.digests.size() != layout.n_expert) {
        throw Error(ErrorCode::invalid_argument, "tensor '" + t.name + "' has " + std::to_string(t.digests.size()) +
                                                     " digests for " + std::to_string(layout.n_expert) + " experts");
      }
      total = checked_add(total, align_up(t.expert_bytes), "shard bytes");
    }
  }
}

uint32_t usable_alignment(uint32_t a) {
  return a > 1 && a <= kSlotAlignment && (a & (a - 1)) == 0 ? a : 1;
}

uint64_t slot_bytes(const ShardLayout& layout, uint32_t layer, uint32_t alignment) {
  const uint64_t room = usable_alignment(alignment) - 1;
  uint64_t total = 0;
  for (const TensorSlice& t : layout.layers.at(layer).tensors) total += align_up(t.expert_bytes + room);
  return std::max(total, layout.layers.at(layer).slot_bytes_floor);
}

ShardExtent shard_extent(const ShardLayout& layout, ShardKey key, uint32_t tensor, uint32_t alignment) {
  const uint64_t a = usable_alignment(alignment);
  const auto& tensors = layout.layers.at(key.layer).tensors;
  uint64_t region = 0;
  for (uint32_t i = 0; i < tensor; ++i) region += align_up(tensors[i].expert_bytes + a - 1);
  const TensorSlice& t = tensors.at(tensor);
  const uint64_t offset = t.file_offset + key.expert * t.expert_stride;
  return {offset, t.expert_bytes, region + (offset & (a - 1)), tensor};
}

std::vector<ShardExtent> shard_extents(const ShardLayout& layout, ShardKey key, uint32_t alignment) {
  std::vector<ShardExtent> out;
  const uint32_t n = static_cast<uint32_t>(layout.layers.at(key.layer).tensors.size());
  for (uint32_t i = 0; i < n; ++i) out.push_back(shard_extent(layout, key, i, alignment));
  return out;
}

uint64_t extent_digest(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

}  // namespace sluice::cache
