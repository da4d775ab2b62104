#include "core/gpu/vram_expert_cache.h"

#include <string>

#include "common/error.h"

namespace sluice::core {

VramExpertCache::Policy VramExpertCache::parse_policy(std::string_view name) {
  if (name == "lru") return Policy::lru;
  if (name == "freq") return Policy::freq;
  throw Error(ErrorCode::invalid_argument, "--vram-policy '" + std::string(name) + "' must be lru or freq");
}

VramExpertCache::VramExpertCache(uint32_t n_slots, int n_layer, int n_expert, Policy policy)
    : n_layer_(n_layer), n_expert_(n_expert), policy_(policy), slots_(n_slots) {
  if (n_layer < 0 || n_expert < 0 || static_cast<int64_t>(n_layer) * n_expert > INT32_MAX)
    throw Error(ErrorCode::internal, "VRAM expert cache over " + std::to_string(n_layer) + " layers x " +
                                         std::to_string(n_expert) + " experts");
  slot_of_key_.assign(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), -1);
  uses_.assign(slot_of_key_.size(), 0);
}

int32_t VramExpertCache::key_of(int layer, int expert) const {
  if (layer < 0 || layer >= n_layer_ || expert < 0 || expert >= n_expert_)
    throw Error(ErrorCode::internal, "VRAM expert cache: no expert " + std::to_string(expert) + " in layer " +
                                         std::to_string(layer));
  return layer * n_expert_ + expert;
}

int64_t VramExpertCache::find(int layer, int expert) {
  const int32_t key = key_of(layer, expert);
  ++uses_[static_cast<size_t>(key)];
  const int32_t slot = slot_of_key_[static_cast<size_t>(key)];
  if (slot >= 0) slots_[static_cast<size_t>(slot)].last_use = ++clock_;
  return slot;
}

int64_t VramExpertCache::insert(int layer, int expert) {
  const int32_t key = key_of(layer, expert);
  if (slot_of_key_[static_cast<size_t>(key)] >= 0) return slot_of_key_[static_cast<size_t>(key)];
  int64_t victim = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.key < 0) {  // an empty slot beats any eviction
      victim = static_cast<int64_t>(i);
      break;
    }
    if (s.pins > 0) continue;
    if (victim < 0) {
      victim = static_cast<int64_t>(i);
      continue;
    }
    const Slot& v = slots_[static_cast<size_t>(victim)];
    bool colder = s.last_use < v.last_use;
    if (policy_ == Policy::freq) {
      const uint64_t su = uses_[static_cast<size_t>(s.key)], vu = uses_[static_cast<size_t>(v.key)];
      colder = su < vu || (su == vu && colder);
    }
    if (colder) victim = static_cast<int64_t>(i);
  }
  if (victim < 0) return -1;
  Slot& s = slots_[static_cast<size_t>(victim)];
  if (s.key >= 0) {
    slot_of_key_[static_cast<size_t>(s.key)] = -1;
    ++evictions_;
  } else {
    ++occupied_;
  }
  s.key = key;
  s.last_use = ++clock_;
  slot_of_key_[static_cast<size_t>(key)] = static_cast<int32_t>(victim);
  return victim;
}

void VramExpertCache::pin(int64_t slot) { ++slots_.at(static_cast<size_t>(slot)).pins; }

void VramExpertCache::unpin(int64_t slot) {
  Slot& s = slots_.at(static_cast<size_t>(slot));
  if (s.pins == 0) throw Error(ErrorCode::internal, "VRAM expert slot " + std::to_string(slot) + " unpinned twice");
  --s.pins;
}

}  // namespace sluice::core
