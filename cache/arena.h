// Arena: the expert cache's one allocation, and the plan that carves it into slabs.
//
// The arena is mapped once at start-up (anonymous mmap: page aligned, so 4 KiB aligned for
// O_DIRECT) and never grows; every byte of it counts against the budget. It is cut into one slab
// per size class (layers whose shards need the same slot_bytes), and each slab into equal slots:
//
//   arena: | class 0: n_0 slots x slot_bytes_0 | class 1: n_1 slots x slot_bytes_1 | ...
//
// Slots never change size or class, so there is no fragmentation, and resident bytes are
// exactly (slots in use) x slot_bytes. plan_cache decides n_c: every class first gets its
// working set (n_expert_used slots: one layer's experts pinned at once), then the rest of the
// budget is shared in proportion to the class's total expert bytes, capped at all its shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/shard_layout.h"

namespace sluice::cache {

struct SizeClass {
  uint64_t slot_bytes = 0;
  uint64_t n_slots = 0;
  uint64_t arena_offset = 0;
  std::vector<uint32_t> layers;
};

struct CachePlan {
  std::vector<SizeClass> classes;
  std::vector<uint32_t> class_of_layer;
  uint64_t arena_bytes = 0;  // sum of slabs; <= budget
  uint64_t min_bytes = 0;    // the smallest budget that works
  uint64_t total_slots() const;
};

// Throws Error(budget) when budget_bytes < min_bytes, stating the minimum and why.
// `alignment` is the reader's (shard_layout.h): it sizes the placement pad in each slot.
CachePlan plan_cache(const ShardLayout& layout, uint64_t budget_bytes, uint32_t alignment = 1);

class Arena {
 public:
  // Throws Error(budget) when the memory cannot be mapped.
  explicit Arena(uint64_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace sluice::cache
