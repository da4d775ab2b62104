// ShardCache, lending: designated slots at the arena's tail, taken out of use while the prefill
// batch's scratch needs their bytes of the budget and given back for decode (shard_cache.h,
// "Lending"). Also the slots' layout, which puts them there.
#include <algorithm>

#include "cache/shard_cache.h"
#include "common/release_pages.h"
#include "common/units.h"

namespace sluice::cache {

void ShardCache::lay_out_slots() {
  // How many slots of each class to designate: ceil(spare_c * need / spare) covers `need` in
  // whole slots, in proportion to each class's slots beyond its working set.
  const uint64_t k = layout_.n_expert_used;
  uint64_t spare_bytes = 0;
  for (const SizeClass& c : plan_.classes) spare_bytes += (c.n_slots - k) * c.slot_bytes;
  const uint64_t need = std::min(options_.lendable_bytes, spare_bytes);
  lendable_of_class_.assign(plan_.classes.size(), 0);
  for (uint32_t c = 0; c < plan_.classes.size() && need > 0; ++c) {
    const uint64_t spare = plan_.classes[c].n_slots - k;
    const auto share = static_cast<uint64_t>((static_cast<unsigned __int128>(spare) * need + spare_bytes - 1) / spare_bytes);
    lendable_of_class_[c] = std::min(spare, share);
    lendable_bytes_ += lendable_of_class_[c] * plan_.classes[c].slot_bytes;
  }
  // Kept slots first, class after class; the designated ones after all of them.
  slots_.resize(plan_.total_slots());
  class_slots_.resize(plan_.classes.size());
  free_slots_.resize(plan_.classes.size());
  uint64_t head = 0, tail = plan_.arena_bytes - lendable_bytes_;
  uint32_t next = 0;
  for (uint32_t c = 0; c < plan_.classes.size(); ++c) {
    const SizeClass& sc = plan_.classes[c];
    for (uint64_t n = 0; n < sc.n_slots; ++n, ++next) {
      const bool lendable = n >= sc.n_slots - lendable_of_class_[c];
      uint64_t& at = lendable ? tail : head;
      slots_[next].size_class = c;
      slots_[next].data = arena_->data() + at;
      at += sc.slot_bytes;
      class_slots_[c].push_back(next);
      if (lendable) lendable_slots_.push_back(next);
    }
    free_slots_[c].assign(class_slots_[c].rbegin(), class_slots_[c].rend());
  }
  const uint64_t registered = plan_.arena_bytes - lendable_bytes_;
  if (registered > 0) reader_.register_buffer({arena_->data(), registered});
}

uint64_t ShardCache::usable_slots(uint32_t size_class) const {
  std::lock_guard lock(mutex_);
  return plan_.classes.at(size_class).n_slots - (lent_ ? lendable_of_class_.at(size_class) : 0);
}

uint64_t ShardCache::lend() {
  std::unique_lock lock(mutex_);
  if (lent_ || lendable_slots_.empty()) return lendable_bytes_;
  wait_no_reads_locked(lock);
  for (uint32_t s : lendable_slots_) {
    if (slots_[s].pins > 0)
      throw Error(ErrorCode::internal, "cannot lend the cache slot of " + to_string(slots_[s].key) + ": it is pinned");
  }
  for (uint32_t s : lendable_slots_) {
    Slot& x = slots_[s];
    if (x.state == State::free) {
      auto& fs = free_slots_[x.size_class];
      if (auto f = std::find(fs.begin(), fs.end(), s); f != fs.end()) fs.erase(f);
    } else if (x.in_table) {
      ++counters_[x.key.layer].evictions;
      if (x.prefetched_unused) ++counters_[x.key.layer].prefetch_unused_evicted;
      policy_->on_evict(x.key);
      slot_of_[shard_index(x.key, layout_.n_expert)] = -1;
      x.in_table = false;
    }
    x.prefetched_unused = false;
    x.state = State::lent;
    release_pages(x.data, plan_.classes[x.size_class].slot_bytes);
  }
  lent_ = true;
  return lendable_bytes_;
}

void ShardCache::reclaim() {
  std::unique_lock lock(mutex_);
  if (!lent_) return;
  for (uint32_t s : lendable_slots_) {
    slots_[s].state = State::free;
    free_slots_[slots_[s].size_class].push_back(s);
  }
  lent_ = false;
}

}  // namespace sluice::cache
