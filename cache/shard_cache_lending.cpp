// ShardCache, lending: slots taken out of use while the prefill batch's scratch needs their
// bytes of the budget, and given back for decode (shard_cache.h, "Lending").
#include <algorithm>

#include "cache/shard_cache.h"
#include "common/release_pages.h"
#include "common/units.h"

namespace sluice::cache {

uint64_t ShardCache::lendable_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t bytes = lent_bytes_;
  for (const SizeClass& c : plan_.classes) bytes += (c.n_slots - layout_.n_expert_used) * c.slot_bytes;
  return bytes;
}

uint64_t ShardCache::usable_slots(uint32_t size_class) const {
  std::lock_guard lock(mutex_);
  const uint64_t lent = size_class < lent_of_class_.size() ? lent_of_class_[size_class] : 0;
  return plan_.classes.at(size_class).n_slots - lent;
}

uint64_t ShardCache::lend(uint64_t bytes) {
  std::unique_lock lock(mutex_);
  if (bytes <= lent_bytes_) return lent_bytes_;
  wait_no_reads_locked(lock);
  // Per class: the slots still in use beyond the working set, and how many of them to lend.
  const uint64_t k = layout_.n_expert_used;
  std::vector<uint64_t> spare(plan_.classes.size(), 0);
  uint64_t spare_bytes = 0;
  for (uint32_t c = 0; c < plan_.classes.size(); ++c) {
    uint64_t in_use = 0;
    for (uint32_t s : class_slots_[c]) in_use += slots_[s].state != State::lent;
    spare[c] = in_use - k;
    spare_bytes += spare[c] * plan_.classes[c].slot_bytes;
  }
  const uint64_t need = bytes - lent_bytes_;
  if (need > spare_bytes)
    throw Error(ErrorCode::internal, "cannot lend " + human_bytes(need) + " of the expert cache: its slots beyond " +
                                         "one layer's working set hold " + human_bytes(spare_bytes));
  if (arena_offered_) {
    reader_.register_buffer({});
    arena_offered_ = false;
  }
  const size_t first_new = lent_slots_.size();
  lent_of_class_.resize(plan_.classes.size(), 0);
  for (uint32_t c = 0; c < plan_.classes.size(); ++c) {
    // ceil(spare * need / spare_bytes) slots of each class cover `need` between them.
    const uint64_t share = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(spare[c]) * need + spare_bytes - 1) / spare_bytes);
    uint64_t n = std::min(spare[c], share);
    for (auto it = class_slots_[c].rbegin(); n > 0 && it != class_slots_[c].rend(); ++it) {
      Slot& x = slots_[*it];
      if (x.state == State::lent) continue;
      if (x.pins > 0)
        throw Error(ErrorCode::internal, "cannot lend the cache slot of " + to_string(x.key) + ": it is pinned");
      if (x.state == State::free) {
        auto& fs = free_slots_[c];
        if (auto f = std::find(fs.begin(), fs.end(), *it); f != fs.end()) fs.erase(f);
      } else {
        if (x.in_table) {
          ++counters_[x.key.layer].evictions;
          if (x.prefetched_unused) ++counters_[x.key.layer].prefetch_unused_evicted;
          policy_->on_evict(x.key);
          slot_of_[shard_index(x.key, layout_.n_expert)] = -1;
          x.in_table = false;
        }
        x.prefetched_unused = false;
      }
      x.state = State::lent;
      lent_slots_.push_back(*it);
      lent_bytes_ += plan_.classes[c].slot_bytes;
      ++lent_of_class_[c];
      --n;
    }
  }
  for (size_t i = first_new; i < lent_slots_.size(); ++i) {
    const Slot& x = slots_[lent_slots_[i]];
    release_pages(x.data, plan_.classes[x.size_class].slot_bytes);
  }
  return lent_bytes_;
}

void ShardCache::reclaim() {
  std::unique_lock lock(mutex_);
  if (lent_slots_.empty()) return;
  wait_no_reads_locked(lock);
  for (uint32_t s : lent_slots_) {
    slots_[s].state = State::free;
    free_slots_[slots_[s].size_class].push_back(s);
  }
  lent_slots_.clear();
  lent_of_class_.assign(plan_.classes.size(), 0);
  lent_bytes_ = 0;
  if (!arena_offered_ && arena_->size() > 0) {
    reader_.register_buffer({arena_->data(), arena_->size()});
    arena_offered_ = true;
  }
}

}  // namespace sluice::cache
