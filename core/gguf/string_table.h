// StringTable: an append-only set of byte strings, each with an int32 value, with exact-match
// lookup by string_view.
//
// Vocabularies hold 100k-300k short strings (tokens, merge lines) that are read millions of
// times and never change. Node-based maps of std::string cost one or two allocations per entry
// and dominate load time; here all bytes live in one arena and the hash index is a flat
// open-addressing array of entry numbers (linear probing, load factor <= 1/2), so loading is a
// few large allocations. Entry i is the i-th string inserted, readable with view(i).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::core {

class StringTable {
 public:
  static constexpr int32_t kAbsent = -1;

  // Capacity hint: `count` strings totalling `bytes` bytes.
  void reserve(size_t count, size_t bytes);

  // Adds `text` with `value` unless an equal string is already present. Returns the value now
  // stored for `text` (the earlier one when it was present).
  int32_t insert(std::string_view text, int32_t value);

  // The value stored for `text`, or kAbsent.
  int32_t find(std::string_view text) const;

  size_t size() const { return entries_.size(); }
  std::string_view view(size_t entry) const {
    return std::string_view(arena_).substr(entries_[entry].offset, entries_[entry].length);
  }
  int32_t value(size_t entry) const { return entries_[entry].value; }

 private:
  struct Entry {
    uint64_t offset;
    uint32_t length;
    int32_t value;
  };

  size_t slot_of(std::string_view text, size_t hash) const;  // slot holding text, or an empty one
  void rehash(size_t slots);

  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<size_t> hashes_;  // per entry, so rehashing never rereads the bytes
  std::vector<int32_t> slots_;  // entry number, or -1 for empty; size is a power of two
};

}  // namespace sluice::core
