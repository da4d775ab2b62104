// io::Reader: moves bytes from one file into caller-owned memory.
//
// The contract is extent based and asynchronous: a caller submits ReadRequests (file offset,
// length, destination) and later reaps Completions. A completion's `result` is either the full
// length (the reader itself resubmits short reads and retries -EAGAIN/-EINTR) or a negative
// errno (liburing's convention). Past end of file is -ENODATA. Callers turn a failed completion
// into a sluice::Error that names what the bytes were for (tensor, expert); the reader only
// knows offsets.
//
// A destination must stay valid and untouched until its completion has been reaped. `tag` is
// opaque to the reader and comes back in the completion, so callers can find their request.
//
// read_sync() is the simple blocking form for set-up work (parsing the GGUF header); it throws
// Error(io_error) naming the file, offset and length. It must not be mixed with async requests
// of the same reader from another thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sluice::io {

struct ReadRequest {
  uint64_t offset = 0;
  uint64_t length = 0;
  std::byte* dst = nullptr;
  uint64_t tag = 0;
};

struct Completion {
  ReadRequest request;
  int64_t result = 0;  // == request.length on success, -errno on failure
};

class Reader {
 public:
  virtual ~Reader() = default;

  virtual std::string_view backend() const = 0;  // "uring", "pread", "memory", ...
  virtual const std::string& path() const = 0;
  virtual uint64_t file_size() const = 0;

  // Queues reads; may block while the reader's queue is full.
  virtual void submit(std::span<const ReadRequest> requests) = 0;
  // Waits until at least min_complete completions are available (min_complete <= in_flight()),
  // then moves up to out.size() of them into out. Returns how many were written.
  virtual size_t reap(std::span<Completion> out, size_t min_complete) = 0;
  virtual size_t in_flight() const = 0;

  // Blocking read of exactly dst.size() bytes at offset; throws Error(io_error).
  virtual void read_sync(uint64_t offset, std::span<std::byte> dst) = 0;
};

// "pread(...) failed at offset 4096 (+512 bytes) of 'x.gguf': Input/output error"
std::string describe_read_failure(const std::string& path, uint64_t offset, uint64_t length,
                                  int64_t negative_errno);

}  // namespace sluice::io
