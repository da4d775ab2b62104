// Opening a file for reading, with O_DIRECT when the file system allows it.
//
// O_DIRECT moves bytes from the device into user memory without the page cache, which is what
// keeps a streaming run inside its RAM budget. It asks for alignment: file offsets, lengths and
// memory addresses must be multiples of the device's logical block size (512 B or 4 KiB). The
// alignment is taken from statx(STATX_DIOALIGN) when the kernel reports it, and otherwise probed
// with a 512 B and then a 4 KiB read at offset 0.
//
// When the file system refuses O_DIRECT (EINVAL at open or at the probe read; older tmpfs, some
// FUSE and network file systems), the file is reopened buffered and `notice` says so; readers
// then drop the pages they read (posix_fadvise DONTNEED) so the page cache does not grow
// behind the budget's back.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::io {

struct OpenedFile {
  int fd = -1;
  uint64_t size = 0;
  bool direct = false;     // O_DIRECT in effect
  uint32_t alignment = 1;  // power of two; 1 when buffered
  std::string notice;      // one line when O_DIRECT was wanted but refused; empty otherwise
};

// Throws Error(io_error) naming the path when the file is missing, unreadable or not a regular
// file. `simulate_direct_refused` takes the refusal path as if the file system said EINVAL.
OpenedFile open_for_read(const std::string& path, bool want_direct, bool simulate_direct_refused = false);

}  // namespace sluice::io
