// VramExpertCache: which routed experts occupy the GPU's expert slots.
//
// Bookkeeping only (the GPU memory itself belongs to GpuTier): `n_slots` equal slots, each big
// enough for the largest expert (gate + up + down) of any MoE layer, keyed by
// (transformer block, expert). Keys are never host addresses: the RAM arena reuses its slots for
// other experts, so only the (layer, expert) key says what a VRAM slot holds.
//
//   find(key)    the slot holding key (counted as a use), or -1
//   insert(key)  a slot for key, evicting the policy's victim among unpinned slots; -1 when there
//                are no slots or every slot is pinned (the caller computes on the CPU)
//   pin / unpin  a pinned slot is never evicted (its expert is being copied or computed)
//
// Policies: lru (least recently used slot goes) and freq (the slot whose expert has been used
// least often goes, ties to the least recent; use counts are kept for every key, resident or not,
// so a hot expert that was evicted once comes back with its history).
//
// All storage is sized in the constructor: no allocation per lookup.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace sluice::core {

class VramExpertCache {
 public:
  enum class Policy { lru, freq };
  // Error(invalid_argument) for an unknown policy name ("lru" or "freq").
  static Policy parse_policy(std::string_view name);

  VramExpertCache(uint32_t n_slots, int n_layer, int n_expert, Policy policy = Policy::lru);

  int64_t find(int layer, int expert);
  int64_t insert(int layer, int expert);
  void pin(int64_t slot);
  void unpin(int64_t slot);

  uint32_t n_slots() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t occupied() const { return occupied_; }
  uint64_t evictions() const { return evictions_; }
  bool is_pinned(int64_t slot) const { return slots_.at(static_cast<size_t>(slot)).pins > 0; }

 private:
  struct Slot {
    int32_t key = -1;  // layer * n_expert + expert; -1 when empty
    uint32_t pins = 0;
    uint64_t last_use = 0;
  };
  int32_t key_of(int layer, int expert) const;

  int n_layer_, n_expert_;
  Policy policy_;
  std::vector<Slot> slots_;
  std::vector<int32_t> slot_of_key_;  // -1: not resident
  std::vector<uint64_t> uses_;        // per key, for freq
  uint64_t clock_ = 0;
  uint32_t occupied_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace sluice::core
