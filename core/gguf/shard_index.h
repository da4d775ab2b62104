// ShardIndex: XXH3-64 digests of every extent sluice reads as a unit, kept in a sidecar file.
//
// An extent is one expert's slice of one routed-expert tensor (a shard is three of them: gate,
// up, down), or one whole resident tensor. `sluice index MODEL.gguf` computes them at disk speed
// and writes `MODEL.gguf.sluice-index` next to the model, or, when that folder is read-only,
// under $XDG_CACHE_HOME/sluice (default ~/.cache/sluice). The sidecar records the model's size,
// mtime and a digest of its header (bytes before the tensor data), so a manifest that no longer
// matches the file is detected (lookup() says `stale`) and rebuilt rather than trusted.
// A split model (io/split_set.h) has one sidecar for the whole set, named after part 1 whichever
// part's path is given; its fingerprint covers every part (sum of sizes, newest mtime, a digest of
// every part's header).
//
// Verification happens where bytes land (the cache): verify() compares a landed extent with its
// recorded digest.
//
// --verify (VerifyMode) decides what a run does with what lookup() found, in index_for_run():
//   off      no index is read; nothing is said.
//   on       (the default) a current index is used; a missing one costs one notice saying shards
//            are not verified and how to index; a stale one (the model changed after indexing,
//            or the sidecar is unreadable) is Error(corrupt_data) naming both files and the two
//            ways out (re-run `sluice index`, or --verify off). Verification never switches
//            itself off without a word.
//   require  a current index or Error(invalid_argument): refuse to run unverified.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/gguf/gguf.h"
#include "io/reader.h"

namespace sluice::core {

struct IndexedTensor {
  std::string name;
  uint64_t file_offset = 0;
  uint64_t bytes = 0;         // whole tensor
  uint32_t n_parts = 1;       // n_expert for routed-expert tensors, else 1
  std::vector<uint64_t> digests;  // one per part (expert slice), XXH3-64
  uint64_t part_bytes() const { return bytes / n_parts; }
};

enum class VerifyMode { off, on, require };

// What lookup() found next to a model (or in the cache directory).
enum class IndexState { current, missing, stale };

class ShardIndex;

struct ModelFingerprint {
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  uint64_t header_digest = 0;  // XXH3-64 of bytes [0, data_offset)
  bool operator==(const ModelFingerprint&) const = default;
};

class ShardIndex {
 public:
  using Progress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

  // Reads every tensor of the model once and digests each extent.
  static ShardIndex build(const GgufFile& file, io::Reader& reader, const Progress& progress = {});
  struct Lookup;
  // The sidecar for `model_path`: `current` (with the index) when one still matches the model;
  // `stale` when one exists but does not (path and reason say which and why); else `missing`.
  static Lookup lookup(const std::filesystem::path& model_path, const GgufFile& file, io::Reader& reader);
  // lookup()'s index when current; nullopt otherwise.
  static std::optional<ShardIndex> load(const std::filesystem::path& model_path, const GgufFile& file,
                                        io::Reader& reader);
  // Writes the sidecar; returns where it went. Throws Error(io_error) when no location is writable.
  std::filesystem::path save(const std::filesystem::path& model_path) const;

  // Sidecar next to the model, and the fallback in the cache directory.
  static std::filesystem::path sidecar_path(const std::filesystem::path& model_path);
  static std::filesystem::path cache_path(const std::filesystem::path& model_path);

  static ModelFingerprint fingerprint(const std::filesystem::path& model_path, const GgufFile& file,
                                      io::Reader& reader);

  const ModelFingerprint& model() const { return model_; }
  const std::vector<IndexedTensor>& tensors() const { return tensors_; }
  const IndexedTensor* find(std::string_view tensor_name) const;
  // Digest of part `part` (expert index, or 0) of a tensor; throws Error(internal) if unknown.
  uint64_t digest(std::string_view tensor_name, uint32_t part) const;
  // True when `bytes` hash to the recorded digest of that extent.
  bool verify(std::string_view tensor_name, uint32_t part, std::span<const std::byte> bytes) const;
  uint64_t extent_count() const;

 private:
  ModelFingerprint model_;
  std::vector<IndexedTensor> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
};

struct ShardIndex::Lookup {
  IndexState state = IndexState::missing;
  std::optional<ShardIndex> index;  // set when current
  std::filesystem::path path;       // the sidecar used (current) or rejected (stale)
  std::string reason;               // stale: what no longer matches, e.g. "the model's mtime changed"
};

// The index a run verifies against under `mode` (see the top of this file): nullopt for off, or
// for on without an index (then `notices` gets the one line saying so). Throws Error for a stale
// index (on, require) and a missing one (require).
std::optional<ShardIndex> index_for_run(VerifyMode mode, const std::filesystem::path& model_path,
                                        const GgufFile& file, io::Reader& reader, std::vector<std::string>& notices);

uint64_t xxh3_64(std::span<const std::byte> bytes);

}  // namespace sluice::core
