// io::FileSink: writes a new file front to back, the write-side counterpart of io::Reader for
// generators (sluice synth's GgufStreamWriter).
//
// With `direct` the file is opened with O_DIRECT so tens of GB go from the caller's buffers to
// the device without being copied through (and evicting everything else from) the page cache;
// the kernel time of a buffered write of that size is several times the generation time. Then
// every write() must come from a buffer aligned to kDirectAlign and, except for the last one,
// have a length that is a multiple of kDirectAlign: the sink writes the aligned part directly
// and the unaligned tail of the last write through the page cache. Where the filesystem refuses
// O_DIRECT (tmpfs, some overlays) the sink silently writes buffered; direct() tells which.
//
// Errors are Error(io_error) naming the path, the file offset and the OS reason. Short writes
// and EINTR are retried.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sluice::io {

class FileSink {
 public:
  static constexpr size_t kDirectAlign = 4096;

  // Creates or truncates `path`.
  FileSink(const std::string& path, bool direct);
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void write(std::span<const std::byte> data);
  // Closes the file; throws on a failed close. The destructor closes without throwing.
  void close();

  bool direct() const { return direct_; }
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  void write_all(const std::byte* p, size_t n);
  [[noreturn]] void fail(const char* what, int err) const;

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  bool tail_written_ = false;
  uint64_t offset_ = 0;
};

}  // namespace sluice::io
