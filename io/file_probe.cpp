#include "io/file_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace sluice::io {

namespace {

int open_or_throw(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_RDONLY | O_CLOEXEC);
  if (fd < 0 && !(flags & O_DIRECT && errno == EINVAL)) {
    throw Error(ErrorCode::io_error, "cannot open '" + path + "': " + std::strerror(errno));
  }
  return fd;
}

// 0 when statx does not say; otherwise the larger of the memory and offset alignments, or
// UINT32_MAX when the file system reports that it does not support direct IO at all.
uint32_t statx_alignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0) return 0;
  if (!(sx.stx_mask & STATX_DIOALIGN)) return 0;
  if (sx.stx_dio_offset_align == 0) return UINT32_MAX;
  uint32_t a = sx.stx_dio_offset_align > sx.stx_dio_mem_align ? sx.stx_dio_offset_align : sx.stx_dio_mem_align;
  return a;
#else
  (void)fd;
  return 0;
#endif
}

// Tries a direct read of `alignment` bytes at offset 0 into page-aligned memory: 0 or errno.
int probe_read(int fd, uint32_t alignment) {
  void* buf = nullptr;
  if (::posix_memalign(&buf, 4096, alignment < 4096 ? 4096 : alignment) != 0) return ENOMEM;
  ssize_t n;
  do {
    n = ::pread(fd, buf, alignment, 0);
  } while (n < 0 && (errno == EINTR || errno == EAGAIN));
  int err = n < 0 ? errno : 0;
  std::free(buf);
  return err;
}

}  // namespace

OpenedFile open_for_read(const std::string& path, bool want_direct, bool simulate_direct_refused) {
  OpenedFile f;
  int refused_errno = 0;
  if (want_direct) {
    f.fd = simulate_direct_refused ? -1 : open_or_throw(path, O_DIRECT);
    if (f.fd < 0) {
      refused_errno = EINVAL;
    } else {
      uint32_t a = statx_alignment(f.fd);
      if (a == UINT32_MAX) {
        refused_errno = EINVAL;
      } else if (a == 0) {
        int err = probe_read(f.fd, 512);
        if (err == EINVAL) err = probe_read(f.fd, 4096), a = 4096;
        else a = 512;
        if (err != 0) refused_errno = err;
      }
      if (refused_errno == 0 && (a & (a - 1)) != 0) refused_errno = EINVAL;  // not a power of two
      if (refused_errno == 0) {
        f.direct = true;
        f.alignment = a;
      } else {
        ::close(f.fd);
        f.fd = -1;
      }
    }
  }
  if (f.fd < 0) f.fd = open_or_throw(path, 0);
  struct stat st {};
  bool stat_ok = ::fstat(f.fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    int saved = stat_ok ? 0 : errno;
    ::close(f.fd);
    throw Error(ErrorCode::io_error, "'" + path + "' is not a regular file" +
                                         (saved ? std::string(": ") + std::strerror(saved) : ""));
  }
  f.size = static_cast<uint64_t>(st.st_size);
  if (want_direct && !f.direct) {
    f.notice = "O_DIRECT refused for '" + path + "' (" + std::strerror(refused_errno) +
               "); reading through the page cache and dropping pages after each read "
               "(posix_fadvise DONTNEED)";
  }
  return f;
}

}  // namespace sluice::io
