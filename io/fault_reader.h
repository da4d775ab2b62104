// FaultInjectingReader: wraps any Reader and injects the faults a real disk and kernel produce,
// from a seed, so the layers above can be tested against them (LevelDB's FaultInjectionEnv idea).
//
// Which faults the caller sees
// ----------------------------
// Transient (handled inside the wrapper exactly as a real Reader must handle them; the caller
// gets the full length and the right bytes, only later or in another order):
//   * short reads     an inner read is issued for a prefix of the extent; the wrapper reads the
//                     rest itself with further inner reads;
//   * -EAGAIN         an inner read that succeeded is reported as -EAGAIN; the wrapper reissues
//                     it (at most 8 times per extent, then it stops injecting);
//   * delays          a finished completion is held back for 1..4 reap() calls (or until the
//                     caller would otherwise block), so completions arrive reordered.
// Reaching the caller (the cache decides what to do):
//   * transient -EIO  the first read of an extent (offset, length) fails with -EIO; any later
//                     read of the same extent succeeds (tests the caller's retry);
//   * persistent -EIO every read of the chosen extents fails with -EIO (fail_offsets, or a
//                     seeded fraction persistent_eio_rate of extents);
//   * bit flips       a successful completion whose landed bytes have one bit flipped (found
//                     only by checksums, which are the cache's job); either any completion
//                     (bit_flip_rate) or only an extent's first successful read
//                     (first_read_flip_rate: corruption in transit, so one re-read is clean).
// Errors of the inner reader pass through unchanged. read_sync() goes through the same faults
// and throws Error(io_error) naming the offset for the ones that reach the caller.
//
// counts() says how many of each fault were injected. Thread safety: calls serialize on one
// internal mutex (like UringReader); the inner reader is only used from inside that mutex.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "io/reader.h"

namespace sluice::io {

struct FaultOptions {
  uint64_t seed = 1;
  double short_read_rate = 0;      // per inner read
  double eagain_rate = 0;          // per inner read
  double delay_rate = 0;           // per completion
  double transient_eio_rate = 0;   // per extent, first read only
  double persistent_eio_rate = 0;  // per extent, every read
  double bit_flip_rate = 0;        // per successful completion
  double first_read_flip_rate = 0; // per extent, first successful read only (a re-read is clean)
  std::vector<uint64_t> fail_offsets;  // extents starting here always fail with -EIO
  // Not a Reader fault: asks whoever opens the file to behave as if io_uring_queue_init failed
  // (IoOptions::simulate_uring_failure), so the pread fallback can be exercised end to end.
  bool fail_uring_setup = false;
  bool injects_reads() const {
    return short_read_rate > 0 || eagain_rate > 0 || delay_rate > 0 || transient_eio_rate > 0 ||
           persistent_eio_rate > 0 || bit_flip_rate > 0 || first_read_flip_rate > 0 || !fail_offsets.empty();
  }
};

struct FaultCounts {
  uint64_t short_reads = 0;
  uint64_t eagains = 0;
  uint64_t delays = 0;
  uint64_t transient_eios = 0;
  uint64_t persistent_eios = 0;
  uint64_t bit_flips = 0;
};

// Parses a fault spec for a command-line flag or environment variable (e.g. --io-faults):
// comma-separated key=value with keys seed, short, eagain, delay, eio (transient), eio_always
// (persistent rate), flip, flip_once (first_read_flip_rate), fail_at (an offset; may repeat), uring_fail (0 or 1: force the
// io_uring setup failure), e.g. "seed=7,short=0.1,delay=0.2".
// Rates are in [0, 1]. Throws Error(invalid_argument) naming `what` and the bad item.
FaultOptions parse_fault_options(std::string_view spec, std::string_view what = "--io-faults");

class FaultInjectingReader final : public Reader {
 public:
  FaultInjectingReader(std::unique_ptr<Reader> inner, FaultOptions options);
  ~FaultInjectingReader() override;

  std::string_view backend() const override { return backend_; }
  const std::string& path() const override { return inner_->path(); }
  uint64_t file_size() const override { return inner_->file_size(); }
  std::vector<FilePart> parts() const override { return inner_->parts(); }

  void submit(std::span<const ReadRequest> requests) override;
  size_t reap(std::span<Completion> out, size_t min_complete) override;
  size_t in_flight() const override;
  void read_sync(uint64_t offset, std::span<std::byte> dst) override;

  uint32_t alignment() const override { return inner_->alignment(); }
  bool register_buffer(std::span<std::byte> region) override;

  FaultCounts counts() const;
  Reader& inner() { return *inner_; }

 private:
  struct Slot {
    ReadRequest original;
    uint64_t done = 0;         // bytes landed so far
    uint64_t piece = 0;        // length of the inner read in flight
    unsigned eagains = 0;
    bool sync = false;
    bool finished = false;     // sync only: result is ready
    int64_t result = 0;
  };
  struct Held {
    Completion completion;
    unsigned reaps_left = 0;
  };

  uint32_t alloc_slot_locked(const ReadRequest& r, bool sync);
  ReadRequest next_piece_locked(uint32_t slot);
  void handle_inner_locked(const Completion& c);
  void finish_locked(uint32_t slot, int64_t result);
  void pump_inner_locked(size_t min_complete);
  double roll() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  bool persistent_failure(const ReadRequest& r) const;

  std::unique_ptr<Reader> inner_;
  FaultOptions options_;
  std::string backend_;
  mutable std::mutex mutex_;
  std::mt19937_64 rng_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<ReadRequest> batch_;   // inner requests gathered for one inner submit
  std::deque<Completion> ready_;
  std::deque<Held> held_;
  std::unordered_set<uint64_t> seen_extents_;  // transient EIO is decided on first sight only
  std::unordered_set<uint64_t> flip_seen_;     // first_read_flip_rate: extents read cleanly or flipped
  size_t outstanding_ = 0;           // async requests submitted and not reaped
  FaultCounts counts_;
};

}  // namespace sluice::io
