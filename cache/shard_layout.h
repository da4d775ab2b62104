// ShardLayout: where each expert's bytes lie in the model file, and how they land in a slot.
//
// The caller (core/, from the GGUF tensor directory) describes every MoE layer by its stacked
// expert tensors, e.g. blk.3.ffn_gate_exps.weight [n_expert, n_ff, n_embd]: expert e's slice
// of tensor t starts at t.file_offset + e * t.expert_stride and is t.expert_bytes long. A
// shard (one expert of one layer) is one extent per tensor, all landing in one cache slot:
//
//   slot: | region 0: pad, tensor 0 slice | region 1: pad, tensor 1 slice | region 2: ... |
//
// Regions start at multiples of kSlotAlignment inside the slot (the arena is page aligned). For
// a reader that moves bytes with O_DIRECT at alignment A (io::Reader::alignment(), a power of
// two <= kSlotAlignment), each slice starts at region + (file_offset mod A), so that
// (dst - file_offset) % A == 0 and the reader DMAs the slice's aligned interior straight into
// the slot (io/reader.h, "Zero-copy placement"); each region has A - 1 bytes of room for that
// pad. With A = 1 there is no pad. slot_bytes(layer, A) is the sum of the regions; layers with
// equal slot_bytes share a size class (arena.h).
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
  // XXH3-64 of each expert's slice (core::ShardIndex); empty: not verified. Checked on landing.
  std::vector<uint64_t> digests;
};

struct LayerLayout {
  std::vector<TensorSlice> tensors;  // usually gate, up, down
  // A slot is at least this big (0: just what the tensors need). Layers of different sizes given
  // the same floor share one size class, so the arena's minimum is one slot, not one per size.
  uint64_t slot_bytes_floor = 0;
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

// Checks counts, overflow, digest counts, and that every expert slice lies inside a file of
// `file_size` bytes; throws Error(invalid_file) naming the tensor, expert and offsets.
void validate_layout(const ShardLayout& layout, uint64_t file_size);

// `alignment`: the reader's (1, or a power of two <= kSlotAlignment; anything else counts as 1).
uint64_t slot_bytes(const ShardLayout& layout, uint32_t layer, uint32_t alignment = 1);
std::vector<ShardExtent> shard_extents(const ShardLayout& layout, ShardKey key, uint32_t alignment = 1);
// One extent of shard_extents() without allocating (the compute path calls it per tensor).
ShardExtent shard_extent(const ShardLayout& layout, ShardKey key, uint32_t tensor, uint32_t alignment = 1);
uint32_t usable_alignment(uint32_t reader_alignment);

// XXH3-64 of one extent's bytes, as core::ShardIndex records it.
uint64_t extent_digest(std::span<const std::byte> bytes);

}  // namespace sluice::cache
