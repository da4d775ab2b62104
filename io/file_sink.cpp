#include "io/file_sink.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "common/error.h"
#include "common/units.h"

namespace sluice::io {

FileSink::FileSink(const std::string& path, bool direct) : path_(path) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (direct) {
    fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
  }
  if (fd_ < 0) fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) fail("cannot create", errno);
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSink::fail(const char* what, int err) const {
  throw Error(ErrorCode::io_error, std::string(what) + " '" + path_ + "' at offset " + std::to_string(offset_) + " (" +
              human_bytes(offset_) + "): " + std::strerror(err));
}

void FileSink::write_all(const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("cannot write", errno);
    }
    if (w == 0) fail("cannot write", EIO);
    p += w;
    n -= static_cast<size_t>(w);
    offset_ += static_cast<uint64_t>(w);
  }
}

void FileSink::write(std::span<const std::byte> data) {
  if (fd_ < 0) fail("write after close of", EBADF);
  if (!direct_) {
    write_all(data.data(), data.size());
    return;
  }
  if (tail_written_ || reinterpret_cast<uintptr_t>(data.data()) % kDirectAlign != 0)
    throw Error(ErrorCode::internal, "FileSink: unaligned O_DIRECT write to '" + path_ + "' at offset " +
                std::to_string(offset_));
  const size_t aligned = data.size() / kDirectAlign * kDirectAlign;
  write_all(data.data(), aligned);
  if (aligned < data.size()) {  // the last, unaligned piece goes through the page cache
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) < 0) fail("cannot clear O_DIRECT on", errno);
    write_all(data.data() + aligned, data.size() - aligned);
    tail_written_ = true;
  }
}

void FileSink::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
}

}  // namespace sluice::io
