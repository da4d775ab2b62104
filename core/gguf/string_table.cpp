#include "core/gguf/string_table.h"

#include <functional>

#include "common/error.h"

namespace sluice::core {

namespace {

size_t hash_of(std::string_view text) { return std::hash<std::string_view>{}(text); }

size_t slots_for(size_t count) {
  size_t slots = 16;
  while (slots < 2 * count) slots *= 2;
  return slots;
}

}  // namespace

void StringTable::reserve(size_t count, size_t bytes) {
  arena_.reserve(bytes);
  entries_.reserve(count);
  hashes_.reserve(count);
  if (slots_for(count) > slots_.size()) rehash(slots_for(count));
}

size_t StringTable::slot_of(std::string_view text, size_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const int32_t entry = slots_[slot];
    if (entry < 0) return slot;
    if (hashes_[entry] == hash && view(static_cast<size_t>(entry)) == text) return slot;
  }
}

void StringTable::rehash(size_t slots) {
  slots_.assign(slots, -1);
  const size_t mask = slots - 1;
  for (size_t entry = 0; entry < entries_.size(); ++entry) {
    size_t slot = hashes_[entry] & mask;
    while (slots_[slot] >= 0) slot = (slot + 1) & mask;
    slots_[slot] = static_cast<int32_t>(entry);
  }
}

int32_t StringTable::insert(std::string_view text, int32_t value) {
  if (entries_.size() >= static_cast<size_t>(INT32_MAX) || text.size() > UINT32_MAX) {
    throw Error(ErrorCode::invalid_file, "string table overflow: more than 2^31 strings or a string over 4 GiB");
  }
  if (2 * (entries_.size() + 1) > slots_.size()) rehash(slots_for(entries_.size() + 1));
  const size_t hash = hash_of(text);
  const size_t slot = slot_of(text, hash);
  if (slots_[slot] >= 0) return entries_[slots_[slot]].value;
  entries_.push_back({arena_.size(), static_cast<uint32_t>(text.size()), value});
  hashes_.push_back(hash);
  arena_.append(text);
  slots_[slot] = static_cast<int32_t>(entries_.size() - 1);
  return value;
}

int32_t StringTable::find(std::string_view text) const {
  if (slots_.empty()) return kAbsent;
  const int32_t entry = slots_[slot_of(text, hash_of(text))];
  return entry < 0 ? kAbsent : entries_[entry].value;
}

}  // namespace sluice::core
