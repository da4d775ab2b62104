// Split models: the files of llama.cpp's gguf-split layout, found by name and read as one address
// space.
//
// Naming: gguf-split writes `<prefix>-00001-of-00003.gguf`, `<prefix>-00002-of-00003.gguf`, ...
// (5-digit part number from 1, 5-digit count). Any part's path names the whole set: the readers
// derive every sibling's path from it (split_set_paths) and open them all. A path that does not
// follow the pattern, or names a set of one, is a plain file.
//
// Address space (PartMap): part i's bytes lie at [base_i, base_i + bytes_i), with
//   base_0 = 0, base_{i+1} = round_up(base_i + bytes_i, kPartBaseAlignment).
// The bases are multiples of 4 KiB, the largest O_DIRECT block size sluice meets, so an offset in
// the space and the same byte's offset in its part agree modulo the block size: a destination
// placed for zero-copy by placement_pad() on the space's offset is placed right in the part too.
// The padding between parts (under 4 KiB each) belongs to no file and reads as zeros; tensors
// never lie there (each part's GGUF directory puts them inside the part), only a read whose
// alignment rounding spills over a part's end touches it.
//
// Which set problems are caught here and which in core/gguf: io/ only knows names and sizes, so
// it refuses a set with a missing part (naming the part); split.no / split.count /
// split.tensors.count, another model's part and a truncated part are GGUF-level checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/reader.h"

namespace sluice::io {

struct SplitName {
  std::string prefix;  // path up to "-NNNNN-of-MMMMM.gguf"
  uint32_t no = 0;     // 1-based, as in the name
  uint32_t count = 0;
};

// The split name of `path`, or nullopt when it does not follow the pattern (1 <= no <= count).
std::optional<SplitName> parse_split_name(const std::string& path);
// "<prefix>-0000<no>-of-0000<count>.gguf"
std::string split_part_path(const std::string& prefix, uint32_t no, uint32_t count);
// Every part's path in order, for a split name with count > 1; {path} otherwise. Throws
// Error(invalid_file) "part 2 of 3 of split model '...' is missing: '...' does not exist" for the
// first part that is not there.
std::vector<std::string> split_set_paths(const std::string& path);
// Part 1's path for a split name (what the set is known by: its index sidecar), else `path`.
std::string split_first_part(const std::string& path);

constexpr uint64_t kPartBaseAlignment = 4096;

class PartMap {
 public:
  PartMap() = default;
  // Lays out files of the given paths and sizes (FilePart::base is computed, not read).
  PartMap(const std::vector<std::string>& paths, const std::vector<uint64_t>& sizes);

  const std::vector<FilePart>& parts() const { return parts_; }
  size_t size() const { return parts_.size(); }
  uint64_t end() const { return end_; }  // size of the address space

  // The longest run from `offset` (< end()) of at most `max_length` bytes that lies in one part
  // (part >= 0, local = offset in that part) or in the padding after one (part = -1: zeros).
  struct Run {
    int part = -1;
    uint64_t local = 0;
    uint64_t length = 0;
  };
  Run run_at(uint64_t offset, uint64_t max_length) const;

  // "read of 512 bytes at offset 4096 of 'x.gguf' failed: ..." for a plain file; for a set, the
  // part and the offset in it: "... at offset 9000 (part 2 of 3 'x-00002-of-00003.gguf', offset
  // 808) failed: ...".
  std::string describe_read_failure(const std::string& path, uint64_t offset, uint64_t length,
                                    int64_t negative_errno) const;

 private:
  std::vector<FilePart> parts_;
  uint64_t end_ = 0;
};

}  // namespace sluice::io
