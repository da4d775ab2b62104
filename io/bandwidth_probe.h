// probe_bandwidth: how fast can this file be read at random, shard-sized, at each queue depth?
//
// For each depth d in `depths`, keeps d reads of `read_size` bytes in flight at random
// read_size-aligned offsets of the file (at most 4 KiB-aligned when the file is smaller than a
// few reads) for `seconds_per_depth` seconds or `max_bytes_per_depth` bytes, whichever comes
// first, and reports the achieved bandwidth. The maximum over depths is the raw bandwidth the
// device delivers to sluice: `sluice bench io` prints it, and the prefetcher's budget of bytes
// per token is derived from it.
//
// Destinations are page-aligned so O_DIRECT reads land without staging; when the file system
// refuses O_DIRECT the figures are buffered reads with pages dropped after each read (the
// notices say so), and include whatever the page cache still held.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/open_reader.h"

namespace sluice::io {

struct BandwidthOptions {
  uint64_t read_size = 8u << 20;
  std::vector<unsigned> depths = {1, 2, 4, 8, 16, 32, 64};
  double seconds_per_depth = 2.0;
  uint64_t max_bytes_per_depth = 0;        // 0: no byte limit
  uint64_t max_buffer_bytes = 256u << 20;  // destination memory; reads share buffers beyond it
  uint64_t seed = 42;
  bool misaligned = false;  // destinations 32 bytes off the file's alignment: measures staging
  IoOptions io;                            // kind, direct; queue_depth is raised to each depth
};

struct DepthResult {
  unsigned depth = 0;
  uint64_t reads = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  double gb_per_s = 0;  // 1e9 bytes per second
};

struct BandwidthReport {
  std::string path;
  uint64_t file_size = 0;
  uint64_t read_size = 0;
  std::string backend;  // "uring" or "pread"
  bool direct = false;
  bool misaligned = false;
  std::vector<DepthResult> depths;
  double max_gb_per_s = 0;
  unsigned best_depth = 0;
  std::vector<std::string> notices;
};

// Throws Error(io_error) for an unreadable file and Error(invalid_argument) for an empty file,
// a zero read size or an empty depth list; a read failure is Error(io_error) naming the offset.
BandwidthReport probe_bandwidth(const std::string& path, const BandwidthOptions& options);

}  // namespace sluice::io
