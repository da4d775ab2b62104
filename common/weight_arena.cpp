#include "common/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "common/units.h"

namespace sluice {

namespace {
constexpr uint64_t kHugePage = 2ull << 20;
uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
}  // namespace

uint64_t place_for_direct_read(uint64_t cursor, uint64_t file_offset, uint64_t bytes, uint64_t min_align) {
  if (bytes < kDirectPlacementMin || file_offset % min_align != 0) return round_up(cursor, min_align);
  const uint64_t m = kDirectReadAlignment;
  return cursor + ((file_offset % m) + m - (cursor % m)) % m;
}

void WeightArenaFree::operator()(std::byte* p) const { std::free(p); }

uint64_t weight_arena_bytes(uint64_t bytes) { return round_up(std::max<uint64_t>(bytes, 1), kDirectReadAlignment); }

WeightArena allocate_weight_arena(uint64_t bytes, const std::string& what) {
  const uint64_t size = weight_arena_bytes(bytes);
  void* mem = std::aligned_alloc(kDirectReadAlignment, size);
  if (!mem) throw Error(ErrorCode::budget, "cannot allocate " + human_bytes(bytes) + " for " + what);
  // Advice only: without THP the arena still works, with 4 KiB pages (and it costs no memory:
  // only the 2 MiB pages wholly inside the allocation are advised).
  const uintptr_t begin = round_up(reinterpret_cast<uintptr_t>(mem), kHugePage);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(mem) + size) / kHugePage * kHugePage;
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return WeightArena(static_cast<std::byte*>(mem));
}

}  // namespace sluice
