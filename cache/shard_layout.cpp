#include "cache/shard_layout.h"

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
      total = checked_add(total, align_up(t.expert_bytes), "shard bytes");
    }
  }
}

uint64_t slot_bytes(const ShardLayout& layout, uint32_t layer) {
  uint64_t total = 0;
  for (const TensorSlice& t : layout.layers.at(layer).tensors) total += align_up(t.expert_bytes);
  return total;
}

std::vector<ShardExtent> shard_extents(const ShardLayout& layout, ShardKey key) {
  std::vector<ShardExtent> out;
  uint64_t at = 0;
  const auto& tensors = layout.layers.at(key.layer).tensors;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    const TensorSlice& t = tensors[i];
    out.push_back({t.file_offset + key.expert * t.expert_stride, t.expert_bytes, at, i});
    at += align_up(t.expert_bytes);
  }
  return out;
}

uint64_t shard_checksum(std::span<const std::byte> slot, std::span<const ShardExtent> extents) {
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  for (const ShardExtent& e : extents) XXH3_64bits_update(state, slot.data() + e.slot_offset, e.length);
  uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

}  // namespace sluice::cache
