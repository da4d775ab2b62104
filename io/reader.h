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
//
// Zero-copy placement (for the cache): a reader that moves bytes with O_DIRECT reports its
// block alignment A through alignment(). It reads the block-aligned interior of an extent
// straight into the destination when (uintptr_t(dst) - offset) % A == 0, and only the partial
// head and tail blocks through its own staging area; any other destination still gets exactly
// the right bytes, just through the staging area (one extra memcpy). placement_pad() gives the
// pad to put before a destination inside a slot so that it lands aligned.
//
// Thread safety: the readers in io/ (uring, pread, fault) accept calls from any thread and
// serialize them internally; a reap() that waits may hold the reader until a completion lands,
// so one IO thread that both submits and reaps is the fast pattern. Completions come back in
// any order.
//
// Split models (llama.cpp's gguf-split layout, io/split_set.h): a reader opened on one part of
// `<name>-NNNNN-of-MMMMM.gguf` opens every part and presents them as ONE address space, each
// part's bytes at a base offset (parts() says where); a read addresses that space and the reader
// maps it to (part, offset in the part), splitting a read that crosses from one part into the
// next. Bytes between parts (padding up to the next base) read as zeros. file_size() is the end
// of the address space. Everything above io/ sees one file.
//
// register_buffer() offers a long-lived region (the cache's arena) for the reader to register
// with the kernel (io_uring fixed buffers). It returns false when this reader cannot or the
// kernel refuses (RLIMIT_MEMLOCK, file-backed memory, no io_uring): reads into the region stay
// correct either way, they just do not use the fixed-buffer fast path. Call it while nothing is
// in flight; the region must outlive the reader or a later register_buffer({}).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::io {

struct ReadRequest {
  uint64_t offset = 0;
  uint64_t length = 0;
  std::byte* dst = nullptr;
  uint64_t tag = 0;
};

// One file of a reader's address space: its bytes are at [base, base + bytes).
struct FilePart {
  std::string path;
  uint64_t base = 0;
  uint64_t bytes = 0;
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

  // The files behind the address space, in order (one for a plain file).
  virtual std::vector<FilePart> parts() const { return {FilePart{path(), 0, file_size()}}; }

  // 1 when any destination is as good as any other; see "Zero-copy placement" above.
  virtual uint32_t alignment() const { return 1; }
  // Offers `region` for registration (replacing an earlier one; empty: unregister).
  virtual bool register_buffer(std::span<std::byte> region) {
    (void)region;
    return false;
  }
};

// Bytes to skip from `slot_start` so that a read of file `offset` landing there is zero-copy for
// a reader of the given alignment (a power of two): (slot_start + pad - offset) % alignment == 0.
inline uint64_t placement_pad(const std::byte* slot_start, uint64_t offset, uint32_t alignment) {
  if (alignment <= 1) return 0;
  uint64_t mask = alignment - 1;
  return (offset - reinterpret_cast<uintptr_t>(slot_start)) & mask;
}

// "pread(...) failed at offset 4096 (+512 bytes) of 'x.gguf': Input/output error"
std::string describe_read_failure(const std::string& path, uint64_t offset, uint64_t length,
                                  int64_t negative_errno);

}  // namespace sluice::io
