// ShardKey: the unit the expert cache manages.
//
// A shard is one routed expert of one MoE layer: its slices of the gate, up and down tensors
// (`blk.N.ffn_{gate,up,down}_exps.weight`), read as separate extents into one cache slot. Layers
// are MoE-layer indices 0..n_layer-1 and experts 0..n_expert-1, exactly as in routing traces.
//
// Policies and the shard table index per-shard state densely: shard_index = layer * n_expert +
// expert, so all per-shard arrays are n_layer * n_expert long.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::cache {

struct ShardKey {
  uint32_t layer = 0;
  uint32_t expert = 0;
  friend bool operator==(const ShardKey&, const ShardKey&) = default;
  friend auto operator<=>(const ShardKey&, const ShardKey&) = default;
};

struct ShardKeyHash {
  size_t operator()(const ShardKey& k) const {
    return std::hash<uint64_t>()((static_cast<uint64_t>(k.layer) << 32) | k.expert);
  }
};

// "layer 3 expert 17"
inline std::string to_string(ShardKey key) {
  return "layer " + std::to_string(key.layer) + " expert " + std::to_string(key.expert);
}

inline size_t shard_index(ShardKey key, uint32_t n_expert) {
  return static_cast<size_t>(key.layer) * n_expert + key.expert;
}

}  // namespace sluice::cache
