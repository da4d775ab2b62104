// ShardLayout: where each expert's bytes lie in the model file, and how they land in a slot.
//
// The caller (core/, from the GGUF tensor directory) describes every MoE layer by its stacked
// expert tensors, e.g. blk.3.ffn_gate_exps.weight [n_expert, n_ff, n_embd]: expert e's slice
// of tensor t starts at t.file_offset + e * t.expert_stride and is t.expert_bytes long. A
// shard (one expert of one layer) is one extent per tensor, all landing in one cache slot:
//
//   slot: | tensor 0 slice | pad to 4 KiB | tensor 1 slice | pad | tensor 2 slice | pad |
//
// Each extent starts at a multiple of kSlotAlignment inside the slot, so an O_DIRECT reader
// can DMA straight into it (the arena itself is 4 KiB aligned). slot_bytes(layer) is the sum
// of the padded slices; layers with equal slot_bytes share a size class (arena.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/shard_key.h"

namespace sluice::cache {

constexpr uint64_t kSlotAlignment = 4096;

struct TensorSlice {
  std::string name;            // for error messages: "blk.3.ffn_up_exps.weight"
  uint64_t file_offset = 0;    // absolute file offset of expert 0's slice
  uint64_t expert_stride = 0;  // bytes from one expert's slice to the next
  uint64_t expert_bytes = 0;   // bytes of one expert's slice
};

struct LayerLayout {
  std::vector<TensorSlice> tensors;  // usually gate, up, down
};

struct ShardLayout {
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;  // top-k: shards one token pins per layer
  std::vector<LayerLayout> layers;
  uint32_t n_layer() const { return static_cast<uint32_t>(layers.size()); }
  size_t n_shards() const { return static_cast<size_t>(n_layer()) * n_expert; }
};

struct ShardExtent {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  uint64_t slot_offset = 0;  // where it lands inside the slot
  uint32_t tensor = 0;       // index into LayerLayout::tensors
};

// Checks counts, overflow, and that every expert slice lies inside a file of `file_size`
// bytes; throws Error(invalid_file) naming the tensor, expert and offsets.
void validate_layout(const ShardLayout& layout, uint64_t file_size);

uint64_t slot_bytes(const ShardLayout& layout, uint32_t layer);
std::vector<ShardExtent> shard_extents(const ShardLayout& layout, ShardKey key);

// XXH3-64 over the shard's extents in order (padding excluded): what a checksum manifest stores.
uint64_t shard_checksum(std::span<const std::byte> slot, std::span<const ShardExtent> extents);

}  // namespace sluice::cache
