// UringReader: the fast Reader, built on io_uring with O_DIRECT.
//
// How an extent becomes SQEs
// --------------------------
// With O_DIRECT the kernel DMAs from the device straight into user memory, but only for
// block-aligned file offsets, lengths and addresses (alignment A, probed at open: see
// io/file_probe.h). GGUF aligns tensors to 32 bytes only, so an extent [offset, offset+length)
// is read as its A-aligned superset and the exact bytes are handed back:
//
//   file:   |....[hhhh|iiiiiiiiiiiiiiiiiiiiiiiiiiiiii|tt]....|
//                 head  interior (whole blocks)       tail
//
//   * when (dst - offset) % A == 0 (see placement_pad() in io/reader.h) the interior is read
//     straight into dst, and only the head and tail blocks (at most one each) go through a
//     staging slot and a memcpy;
//   * otherwise the whole superset goes through staging slots (slot_bytes each) and is copied
//     out; correct for any destination, one memcpy slower.
//
// A request thus becomes one or more "ops" (one SQE each). Ops are generated lazily from a
// FIFO of requests as queue slots and staging slots free up, so a multi-GiB request never
// needs more than queue_depth SQEs or the staging area at once. All SQEs prepared in one
// pump go to the kernel with a single io_uring_submit().
//
// Completions, retries and errors
// -------------------------------
//   * short read: the op is resubmitted for the rest (from the last whole block under O_DIRECT);
//     a read that makes no progress means end of file -> -ENODATA;
//   * -EAGAIN / -EINTR: resubmitted, up to kMaxRetries times per op, then the error stands;
//   * any other negative result (-EIO, -EINVAL...) fails the request: its Completion carries the
//     request (so its offset) and the negative errno; the request's other ops are drained first;
//   * extents past the end of file fail with -ENODATA without touching the device;
//   * CQ overflow cannot happen by construction (ops in flight <= queue_depth < CQ size), and
//     would be counted in stats().cq_overflows if the kernel reported one.
//
// Registered buffers
// ------------------
// The staging area is registered with io_uring_register_buffers at construction, and
// register_buffer() adds a caller's region (the cache's arena) so reads into it use
// IORING_OP_READ_FIXED. When the kernel refuses (RLIMIT_MEMLOCK, file-backed memory) the reader
// falls back to plain reads silently; the refusal is counted in stats().registration_failures.
//
// Split models
// ------------
// A path naming one part of a split model opens every part (io/split_set.h), each with O_DIRECT
// when its file system allows it (alignment probed per part), and registers all their
// descriptors with io_uring_register_files so SQEs name a part by its fixed-file index
// (IOSQE_FIXED_FILE; plain descriptors when the kernel refuses). A request addresses the set's
// address space: ops are cut at part ends, each op reads one part at a local offset with that
// part's alignment, and the padding between parts is zero-filled without an op.
// `whole_split_set = false` opens only the named file.
//
// Thread safety
// -------------
// Every public method takes one internal mutex, so any thread may call any method, but the
// calls serialize: a reap() that waits holds the reader until a completion arrives. The
// intended use is one IO thread (the cache's prefetcher) that submits and reaps. The kernel
// makes progress between calls; the reader moves new ops to the kernel only inside submit(),
// reap() and read_sync().
#pragma once

#include <liburing.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "io/aligned_buffer.h"
#include "io/reader.h"
#include "io/split_set.h"

namespace sluice::io {

// Test hooks: rewrite CQE results as if the kernel had returned a short read or -EAGAIN, so the
// resubmit paths run on a machine whose disk never does that. Off by default.
struct UringFaultHooks {
  uint64_t seed = 0;
  double short_read_rate = 0;  // probability a successful CQE is cut short
  double eagain_rate = 0;      // probability a CQE becomes -EAGAIN
};

struct UringOptions {
  unsigned queue_depth = 64;           // SQ entries = max ops in flight
  bool direct = true;                  // O_DIRECT; buffered + DONTNEED when refused
  uint64_t staging_bytes = 4u << 20;   // bounce area for unaligned heads/tails/destinations
  uint64_t slot_bytes = 256u << 10;    // one staging slot (rounded up to the alignment)
  bool register_staging = true;        // try to register the staging area as a fixed buffer
  bool simulate_setup_failure = false; // constructor throws as if io_uring_queue_init failed
  bool simulate_direct_refused = false;
  bool whole_split_set = true;         // a split model's part opens the whole set
  UringFaultHooks hooks;
};

struct UringStats {
  uint64_t requests = 0;          // extents submitted
  uint64_t ops = 0;               // SQEs prepared (including resubmissions)
  uint64_t submit_calls = 0;      // io_uring_submit() calls
  uint64_t direct_ops = 0;        // ops that landed straight in the caller's memory
  uint64_t staged_ops = 0;        // ops that went through a staging slot
  uint64_t fixed_ops = 0;         // ops issued as READ_FIXED
  uint64_t bytes_delivered = 0;   // bytes of successful requests
  uint64_t bytes_read = 0;        // bytes the device returned (includes alignment padding)
  uint64_t short_reads = 0;       // resubmitted after a short read
  uint64_t retries = 0;           // resubmitted after -EAGAIN / -EINTR
  uint64_t failed_requests = 0;   // completions with a negative result
  uint64_t registration_failures = 0;
  uint64_t cq_overflows = 0;
};

class UringReader final : public Reader {
 public:
  static constexpr unsigned kMaxRetries = 64;

  // Throws Error(io_error) naming the path when the file cannot be opened, and
  // Error(unsupported) starting with "io_uring setup failed" when the ring cannot be created
  // (old kernel, seccomp, io_uring_disabled); open_reader() falls back to PreadReader on that.
  explicit UringReader(const std::string& path, UringOptions options = {});
  ~UringReader() override;
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;

  std::string_view backend() const override { return "uring"; }
  const std::string& path() const override { return path_; }
  uint64_t file_size() const override { return file_size_; }
  std::vector<FilePart> parts() const override { return map_.parts(); }

  void submit(std::span<const ReadRequest> requests) override;
  size_t reap(std::span<Completion> out, size_t min_complete) override;
  size_t in_flight() const override;
  void read_sync(uint64_t offset, std::span<std::byte> dst) override;

  uint32_t alignment() const override { return alignment_; }
  bool register_buffer(std::span<std::byte> region) override;

  bool direct() const { return direct_; }  // every part is read with O_DIRECT
  bool files_registered() const { return files_registered_; }
  // One line when O_DIRECT was wanted but refused; empty otherwise.
  const std::string& notice() const { return notice_; }
  bool staging_registered() const;
  bool region_registered() const;
  UringStats stats() const;

 private:
  struct Part {
    int fd = -1;
    bool direct = false;
    uint32_t alignment = 1;
  };
  struct Op {
    uint32_t request = 0;
    uint32_t part = 0;
    uint64_t file_offset = 0;  // where the kernel reads in the part (aligned under O_DIRECT)
    uint64_t length = 0;       // bytes asked of the kernel
    uint64_t done = 0;         // bytes landed (after short reads)
    uint64_t needed = 0;       // bytes from file_offset that must land for success
    std::byte* target = nullptr;  // caller memory or a staging slot
    int slot = -1;                // staging slot, -1 for direct ops
    uint64_t copy_skip = 0;       // staged: copy [copy_skip, copy_skip+copy_len) to copy_dst
    uint64_t copy_len = 0;
    std::byte* copy_dst = nullptr;
    unsigned retries = 0;
    unsigned stalls = 0;
  };
  struct RequestState {
    ReadRequest request;
    uint64_t cursor = 0;  // next file byte not yet given to an op
    uint32_t ops_outstanding = 0;
    int64_t error = 0;
    bool sync = false;  // read_sync's own request: result goes to sync_result_
    bool done = false;
  };

  void enqueue_locked(const ReadRequest& r, bool sync);
  void finish_request_locked(uint32_t index);
  enum class Step { op, wait_for_slot, no_op };  // no_op: padding zero-filled, cursor moved
  Step next_op_locked(uint32_t index, Op& op);
  void pump_locked();
  size_t process_cqes_locked(bool wait);
  void complete_op_locked(uint32_t op_index, int32_t res);
  void prep_sqe_locked(uint32_t op_index);
  void submit_sqes_locked();
  int fixed_index_for(const std::byte* p, uint64_t length) const;
  bool register_all_locked();

  void close_files();

  std::string path_;
  std::vector<Part> files_;  // one per part of the address space
  PartMap map_;
  bool files_registered_ = false;
  uint64_t file_size_ = 0;
  bool direct_ = false;
  uint32_t alignment_ = 1;  // the largest part alignment
  std::string notice_;
  UringOptions options_;
  io_uring ring_{};
  bool ring_ok_ = false;

  mutable std::mutex mutex_;
  AlignedBuffer staging_;
  uint64_t slot_bytes_ = 0;
  std::vector<int> free_slots_;
  std::vector<Op> ops_;             // queue_depth entries
  std::vector<uint32_t> free_ops_;
  std::deque<uint32_t> retry_ops_;  // ops waiting for resubmission (own their slot already)
  std::vector<RequestState> requests_;
  std::vector<uint32_t> free_requests_;
  std::deque<uint32_t> active_;     // requests with bytes not yet given to an op, FIFO
  std::deque<Completion> done_;
  size_t outstanding_ = 0;          // async requests submitted and not yet reaped
  unsigned ops_in_kernel_ = 0;
  unsigned sqes_pending_ = 0;       // prepared, not yet submitted
  uint32_t sync_index_ = 0;         // read_sync's request (calls serialize on mutex_)

  // Registration: iovecs of [staging, region chunks...]
  std::vector<iovec> iovecs_;
  bool registered_ = false;
  std::span<std::byte> region_;
  bool region_registered_ = false;

  UringStats stats_;
  std::mt19937_64 hook_rng_;
};

}  // namespace sluice::io
