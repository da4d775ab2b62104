// Weight arenas: one allocation for a model's resident tensors, laid out so that the load reads
// straight into place.
//
// Why: the load reads the file with O_DIRECT (io/uring_reader.h). A read lands in its destination
// only where the destination and the file offset agree modulo the device block (at most 4 KiB);
// otherwise every byte goes through the reader's small staging area and a memcpy, which page-faults
// the arena 4 KiB at a time. Measured on a 13 GB file: 84 MB/s, 57% of the time in memmove and 32%
// in its page faults. Placing each tensor congruent to its file offset, and backing the arena with
// transparent huge pages, lets the disk write the weights directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sluice {

// The largest O_DIRECT block size sluice meets (io/split_set.h lays part bases on it too).
inline constexpr uint64_t kDirectReadAlignment = 4096;

// Where a tensor of `bytes` read from `file_offset` goes in an arena whose next free offset is
// `cursor` (the arena itself is kDirectReadAlignment-aligned): for a large tensor whose file
// offset is min_align-aligned, the first offset congruent to file_offset modulo
// kDirectReadAlignment (at most 4 KiB of padding, so only worth it above kDirectPlacementMin);
// otherwise cursor rounded up to min_align.
inline constexpr uint64_t kDirectPlacementMin = 1ull << 20;
uint64_t place_for_direct_read(uint64_t cursor, uint64_t file_offset, uint64_t bytes, uint64_t min_align);

struct WeightArenaFree {
  void operator()(std::byte* p) const;
};
using WeightArena = std::unique_ptr<std::byte, WeightArenaFree>;

// `bytes` of memory (rounded up to 4 KiB, no more: budgets count these bytes), aligned to
// kDirectReadAlignment; its whole 2 MiB pages are advised for transparent huge pages (the kernel's
// madvise mode; elsewhere the advice is ignored). Throws Error(budget) naming `what` when the
// allocation fails.
WeightArena allocate_weight_arena(uint64_t bytes, const std::string& what);

// The bytes allocate_weight_arena(bytes) takes: what a budget must count.
uint64_t weight_arena_bytes(uint64_t bytes);

}  // namespace sluice
