// open_reader: picks the IO backend for a file.
//
//   kind = automatic  io_uring when the kernel allows it, else PreadReader (one notice line)
//   kind = uring      io_uring or Error(unsupported) naming the reason
//   kind = pread      PreadReader (worker pool; buffered reads that drop their pages)
//
// O_DIRECT is wanted when `direct` is set; when the file system refuses it the uring reader
// reads buffered and drops the pages it read (posix_fadvise DONTNEED), and a notice says so.
// PreadReader never uses O_DIRECT. io/ never prints: notices come back in the result (and go
// to `on_notice` when set) for the caller to show. `--io uring|pread|auto` maps onto kind via
// parse_io_kind().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/reader.h"

namespace sluice::io {

enum class IoKind { automatic, uring, pread };

struct IoOptions {
  IoKind kind = IoKind::automatic;
  unsigned queue_depth = 64;          // uring SQ depth; pread: also caps the worker count
  bool direct = true;
  unsigned pread_workers = 0;         // 0: min(queue_depth, 32)
  uint64_t staging_bytes = 4u << 20;  // uring bounce area (unaligned heads, tails, destinations)
  bool simulate_uring_failure = false;   // tests: as if io_uring_queue_init failed
  bool simulate_direct_refused = false;  // tests: as if the file system refused O_DIRECT
  std::function<void(const std::string&)> on_notice;  // optional; also returned in notices
};

struct OpenedReader {
  std::unique_ptr<Reader> reader;
  std::vector<std::string> notices;  // one line each: fallbacks taken, in order
};

// Throws Error(io_error) naming the path when the file cannot be opened, whatever the backend.
OpenedReader open_reader(const std::string& path, const IoOptions& options = {});

// "auto" | "uring" | "pread"; throws Error(invalid_argument) naming `what` (e.g. "--io").
IoKind parse_io_kind(std::string_view text, std::string_view what = "--io");
std::string_view to_string(IoKind kind);

}  // namespace sluice::io
