#include "common/weight_arena.h"

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "common/huge_pages.h"
#include "common/units.h"

namespace sluice {

namespace {
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
  // At least one block: a load whose tensors are all mapped in place (io/file_mapping.h) has none.
  void* mem = std::aligned_alloc(kDirectReadAlignment, std::max(size, kDirectReadAlignment));
  if (!mem) throw Error(ErrorCode::budget, "cannot allocate " + human_bytes(bytes) + " for " + what);
  advise_huge_pages(mem, size);
  return WeightArena(static_cast<std::byte*>(mem));
}

}  // namespace sluice
