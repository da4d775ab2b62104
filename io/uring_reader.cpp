#include "io/uring_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "io/file_probe.h"

namespace sluice::io {

namespace {

constexpr uint64_t kMaxOpBytes = 1ull << 30;     // io_uring lengths are 32-bit
constexpr uint64_t kMaxRegisterChunk = 1ull << 30;  // the kernel's limit per registered iovec

uint64_t round_down(uint64_t x, uint64_t a) { return x & ~(a - 1); }
uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

}  // namespace

UringReader::UringReader(const std::string& path, UringOptions options)
    : path_(path), options_(options), hook_rng_(options.hooks.seed) {
  if (options_.queue_depth == 0 || options_.queue_depth > 4096) {
    throw Error(ErrorCode::invalid_argument, "io queue depth must be in [1, 4096], got " +
                                                 std::to_string(options_.queue_depth));
  }
  const std::vector<std::string> paths = options_.whole_split_set ? split_set_paths(path) : std::vector{path};
  std::vector<uint64_t> sizes;
  try {
    for (const std::string& p : paths) {
      OpenedFile f = open_for_read(p, options_.direct, options_.simulate_direct_refused);
      files_.push_back(Part{f.fd, f.direct, f.alignment});
      sizes.push_back(f.size);
      if (notice_.empty()) notice_ = f.notice;
    }
  } catch (...) {
    close_files();
    throw;
  }
  map_ = PartMap(paths, sizes);
  file_size_ = map_.end();
  direct_ = true;
  for (const Part& f : files_) {
    direct_ = direct_ && f.direct;
    alignment_ = std::max(alignment_, f.alignment);
  }

  int r = -ENOSYS;
  if (!options_.simulate_setup_failure) {
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = 2 * options_.queue_depth;
    r = io_uring_queue_init_params(options_.queue_depth, &ring_, &params);
  }
  if (r < 0) {
    close_files();
    throw Error(ErrorCode::unsupported,
                "io_uring setup failed for '" + path + "': " +
                    (options_.simulate_setup_failure ? std::string("simulated failure")
                                                     : std::string(std::strerror(-r))));
  }
  ring_ok_ = true;

  // Fixed files: SQEs name a part by index, saving the kernel a descriptor lookup per read.
  std::vector<int> fds;
  for (const Part& f : files_) fds.push_back(f.fd);
  files_registered_ = io_uring_register_files(&ring_, fds.data(), static_cast<unsigned>(fds.size())) == 0;

  ops_.resize(options_.queue_depth);
  for (uint32_t i = options_.queue_depth; i-- > 0;) free_ops_.push_back(i);

  // Staging only matters under O_DIRECT; buffered reads land anywhere.
  if (alignment_ > 1) {
    uint64_t unit = std::max<uint64_t>(alignment_, 4096);
    slot_bytes_ = round_up(std::max<uint64_t>(options_.slot_bytes, unit), unit);
    uint64_t slots = std::max<uint64_t>(2, options_.staging_bytes / slot_bytes_);
    slots = std::min<uint64_t>(slots, 4096);
    try {
      staging_ = AlignedBuffer(slots * slot_bytes_);
    } catch (...) {
      io_uring_queue_exit(&ring_);
      close_files();
      throw;
    }
    for (int i = static_cast<int>(slots); i-- > 0;) free_slots_.push_back(i);
    if (options_.register_staging) register_all_locked();
  }
}

UringReader::~UringReader() {
  // The kernel may still be writing into staging or caller memory: let it finish first.
  {
    std::lock_guard lock(mutex_);
    try {
      while (ops_in_kernel_ > 0) process_cqes_locked(true);
    } catch (...) {
    }
  }
  if (ring_ok_) io_uring_queue_exit(&ring_);
  close_files();
}

void UringReader::close_files() {
  for (const Part& f : files_) ::close(f.fd);
  files_.clear();
}

void UringReader::submit(std::span<const ReadRequest> requests) {
  std::lock_guard lock(mutex_);
  for (const ReadRequest& r : requests) enqueue_locked(r, false);
  pump_locked();
}

size_t UringReader::reap(std::span<Completion> out, size_t min_complete) {
  std::lock_guard lock(mutex_);
  if (min_complete > outstanding_) {
    throw Error(ErrorCode::internal, "reap asked for " + std::to_string(min_complete) +
                                         " completions with only " + std::to_string(outstanding_) +
                                         " reads in flight");
  }
  for (;;) {
    process_cqes_locked(false);
    pump_locked();
    if (done_.size() >= min_complete) break;
    process_cqes_locked(true);
  }
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n++] = done_.front();
    done_.pop_front();
    --outstanding_;
  }
  return n;
}

size_t UringReader::in_flight() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

void UringReader::read_sync(uint64_t offset, std::span<std::byte> dst) {
  std::lock_guard lock(mutex_);
  enqueue_locked(ReadRequest{offset, dst.size(), dst.data(), 0}, true);
  uint32_t index = sync_index_;
  for (;;) {
    process_cqes_locked(false);
    pump_locked();
    if (requests_[index].done) break;
    process_cqes_locked(true);
  }
  int64_t error = requests_[index].error;
  free_requests_.push_back(index);
  if (error < 0) {
    throw Error(ErrorCode::io_error, map_.describe_read_failure(path_, offset, dst.size(), error));
  }
}

void UringReader::enqueue_locked(const ReadRequest& r, bool sync) {
  ++stats_.requests;
  uint32_t index;
  if (!free_requests_.empty()) {
    index = free_requests_.back();
    free_requests_.pop_back();
  } else {
    index = static_cast<uint32_t>(requests_.size());
    requests_.emplace_back();
  }
  RequestState& st = requests_[index];
  st = RequestState{};
  st.request = r;
  st.cursor = r.offset;
  st.sync = sync;
  if (sync) sync_index_ = index;
  else ++outstanding_;

  if (r.length == 0) {
    finish_request_locked(index);
  } else if (r.offset > file_size_ || r.length > file_size_ - r.offset) {
    st.error = -ENODATA;
    finish_request_locked(index);
  } else if (r.dst == nullptr) {
    st.error = -EFAULT;
    finish_request_locked(index);
  } else if (sync) {
    active_.push_front(index);  // set-up reads jump the queue; they have their own cursor
  } else {
    active_.push_back(index);
  }
}

void UringReader::finish_request_locked(uint32_t index) {
  RequestState& st = requests_[index];
  st.done = true;
  int64_t result = st.error < 0 ? st.error : static_cast<int64_t>(st.request.length);
  if (result < 0) {
    ++stats_.failed_requests;
  } else {
    stats_.bytes_delivered += st.request.length;
  }
  if (st.sync) return;  // read_sync frees its own slot after reading the result
  done_.push_back(Completion{st.request, result});
  free_requests_.push_back(index);
}

UringReader::Step UringReader::next_op_locked(uint32_t index, Op& op) {
  RequestState& st = requests_[index];
  const uint64_t end = st.request.offset + st.request.length;
  const uint64_t cur = st.cursor;
  std::byte* dst_cur = st.request.dst + (cur - st.request.offset);
  // Ops never cross a part's end; the padding after a part reads as zeros without an op.
  const PartMap::Run run = map_.run_at(cur, end - cur);
  if (run.part < 0) {
    std::memset(dst_cur, 0, run.length);
    st.cursor = cur + run.length;
    return Step::no_op;
  }
  const Part& part = files_[static_cast<size_t>(run.part)];
  const uint64_t lcur = run.local, lend = run.local + run.length;  // offsets in the part
  op = Op{};
  op.request = index;
  op.part = static_cast<uint32_t>(run.part);

  if (!part.direct) {
    uint64_t len = std::min(lend - lcur, kMaxOpBytes);
    op.file_offset = lcur;
    op.length = op.needed = len;
    op.target = dst_cur;
    st.cursor = cur + len;
    return Step::op;
  }

  const uint64_t a = part.alignment;
  const uint64_t interior_end = round_down(lend, a);
  const bool dst_aligned = ((reinterpret_cast<uintptr_t>(dst_cur) - lcur) & (a - 1)) == 0;
  if (dst_aligned && (lcur & (a - 1)) == 0 && interior_end > lcur) {
    uint64_t len = std::min(interior_end - lcur, kMaxOpBytes);
    op.file_offset = lcur;
    op.length = op.needed = len;
    op.target = dst_cur;
    st.cursor = cur + len;
    return Step::op;
  }

  if (free_slots_.empty()) return Step::wait_for_slot;
  const uint64_t start = round_down(lcur, a);
  // Aligned destinations only stage a partial head or tail block; others stage everything.
  uint64_t len = dst_aligned ? a : std::min(slot_bytes_, round_up(lend, a) - start);
  uint64_t copy_end = std::min(lend, start + len);
  op.slot = free_slots_.back();
  free_slots_.pop_back();
  op.file_offset = start;
  op.length = len;
  op.needed = copy_end - start;
  op.target = staging_.data() + static_cast<uint64_t>(op.slot) * slot_bytes_;
  op.copy_skip = lcur - start;
  op.copy_len = copy_end - lcur;
  op.copy_dst = dst_cur;
  st.cursor = cur + (copy_end - lcur);
  return Step::op;
}

void UringReader::pump_locked() {
  while (!retry_ops_.empty()) {
    prep_sqe_locked(retry_ops_.front());
    retry_ops_.pop_front();
  }
  while (!active_.empty() && !free_ops_.empty()) {
    uint32_t ri = active_.front();
    RequestState& st = requests_[ri];
    uint32_t oi = free_ops_.back();
    const Step step = next_op_locked(ri, ops_[oi]);
    if (step == Step::wait_for_slot) break;
    if (step == Step::op) {
      free_ops_.pop_back();
      ++st.ops_outstanding;
    }
    if (st.cursor >= st.request.offset + st.request.length) {
      active_.pop_front();
      // A request whose last bytes were padding may have nothing left in flight.
      if (st.ops_outstanding == 0 && !st.done) finish_request_locked(ri);
    }
    if (step == Step::op) prep_sqe_locked(oi);
  }
  submit_sqes_locked();
}

int UringReader::fixed_index_for(const std::byte* p, uint64_t length) const {
  if (!registered_) return -1;
  for (size_t i = 0; i < iovecs_.size(); ++i) {
    auto* base = static_cast<const std::byte*>(iovecs_[i].iov_base);
    if (p >= base && p + length <= base + iovecs_[i].iov_len) return static_cast<int>(i);
  }
  return -1;
}

void UringReader::prep_sqe_locked(uint32_t oi) {
  Op& op = ops_[oi];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) {
    submit_sqes_locked();
    sqe = io_uring_get_sqe(&ring_);
    if (!sqe) throw Error(ErrorCode::internal, "io_uring submission queue full with " +
                                                   std::to_string(ops_in_kernel_) + " reads in flight");
  }
  uint64_t offset = op.file_offset + op.done;
  std::byte* target = op.target + op.done;
  auto length = static_cast<unsigned>(op.length - op.done);
  const int fd = files_registered_ ? static_cast<int>(op.part) : files_[op.part].fd;
  int fixed = fixed_index_for(target, length);
  if (fixed >= 0) {
    io_uring_prep_read_fixed(sqe, fd, target, length, offset, fixed);
    ++stats_.fixed_ops;
  } else {
    io_uring_prep_read(sqe, fd, target, length, offset);
  }
  if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;  // after prep, which clears the flags
  io_uring_sqe_set_data64(sqe, oi);
  ++sqes_pending_;
  ++stats_.ops;
  if (op.slot >= 0) ++stats_.staged_ops;
  else ++stats_.direct_ops;
}

void UringReader::submit_sqes_locked() {
  while (sqes_pending_ > 0) {
    int r = io_uring_submit(&ring_);
    ++stats_.submit_calls;
    if (r > 0) {
      ops_in_kernel_ += static_cast<unsigned>(r);
      sqes_pending_ -= std::min<unsigned>(sqes_pending_, static_cast<unsigned>(r));
    } else if (r == 0 || r == -EAGAIN || r == -EBUSY || r == -EINTR) {
      // The kernel wants completions reaped first (or is short of resources): make room.
      if (ops_in_kernel_ > 0) process_cqes_locked(true);
      else std::this_thread::yield();
    } else {
      throw Error(ErrorCode::io_error, "io_uring_submit failed for '" + path_ + "': " + std::strerror(-r));
    }
  }
}

size_t UringReader::process_cqes_locked(bool wait) {
  if (wait && ops_in_kernel_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int r;
    do {
      r = io_uring_wait_cqe(&ring_, &cqe);
    } while (r == -EINTR || r == -EAGAIN);
    if (r < 0) throw Error(ErrorCode::io_error, "io_uring wait failed for '" + path_ + "': " + std::strerror(-r));
  }
  if (ring_.cq.koverflow && *ring_.cq.koverflow != 0) {
    stats_.cq_overflows = *ring_.cq.koverflow;  // the kernel keeps overflowed CQEs (FEAT_NODROP)
  }
  unsigned head;
  unsigned count = 0;
  io_uring_cqe* cqe;
  // Collect first, then advance, so complete_op_locked never runs with the CQ half-consumed.
  uint64_t data[64];
  int32_t res[64];
  io_uring_for_each_cqe(&ring_, head, cqe) {
    if (count == 64) break;
    data[count] = cqe->user_data;
    res[count] = cqe->res;
    ++count;
  }
  io_uring_cq_advance(&ring_, count);
  ops_in_kernel_ -= count;
  for (unsigned i = 0; i < count; ++i) complete_op_locked(static_cast<uint32_t>(data[i]), res[i]);
  return count;
}

void UringReader::complete_op_locked(uint32_t oi, int32_t res) {
  Op& op = ops_[oi];
  const Part& part = files_[op.part];
  const UringFaultHooks& hooks = options_.hooks;
  if (hooks.eagain_rate > 0 || hooks.short_read_rate > 0) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double roll = u(hook_rng_);
    if (res >= 0 && roll < hooks.eagain_rate) {
      res = -EAGAIN;
    } else if (res > 1 && u(hook_rng_) < hooks.short_read_rate) {
      uint64_t cut = std::uniform_int_distribution<uint64_t>(1, static_cast<uint64_t>(res) - 1)(hook_rng_);
      if (part.direct) cut = round_down(cut, part.alignment);
      if (cut > 0) res = static_cast<int32_t>(cut);
    }
  }

  RequestState& st = requests_[op.request];
  int64_t failure = 0;
  if (res == -EAGAIN || res == -EINTR) {
    if (++op.retries <= kMaxRetries) {
      ++stats_.retries;
      retry_ops_.push_back(oi);
      return;
    }
    failure = res;
  } else if (res < 0) {
    failure = res;
  } else {
    stats_.bytes_read += static_cast<uint64_t>(res);
    uint64_t landed = op.done + static_cast<uint64_t>(res);
    if (landed < op.needed) {
      if (res == 0) {
        failure = -ENODATA;
      } else {
        // Under O_DIRECT the rest must start on a block boundary: re-read the partial block.
        uint64_t next = part.direct ? round_down(landed, part.alignment) : landed;
        if (next > op.done) {
          op.done = next;
          op.stalls = 0;
        } else if (++op.stalls > 3) {
          failure = -ENODATA;  // a direct read that cannot finish a block: the file ended
        }
        if (failure == 0) {
          ++stats_.short_reads;
          retry_ops_.push_back(oi);
          return;
        }
      }
    }
  }

  if (failure == 0 && op.slot >= 0) std::memcpy(op.copy_dst, op.target + op.copy_skip, op.copy_len);
  if (failure == 0 && !part.direct) {
    // Buffered part: drop the pages just read so the page cache does not grow behind the budget.
    ::posix_fadvise(part.fd, static_cast<off_t>(op.file_offset), static_cast<off_t>(op.length), POSIX_FADV_DONTNEED);
  }
  if (op.slot >= 0) free_slots_.push_back(op.slot);
  free_ops_.push_back(oi);
  --st.ops_outstanding;
  const uint64_t end = st.request.offset + st.request.length;
  if (failure != 0) {
    if (st.error == 0) st.error = failure;
    if (st.cursor < end) {
      // Stop giving the request new ops; a partially issued request is always active_'s head.
      st.cursor = end;
      if (!active_.empty() && active_.front() == op.request) active_.pop_front();
    }
  }
  if (st.ops_outstanding == 0 && st.cursor >= end && !st.done) finish_request_locked(op.request);
}

bool UringReader::register_all_locked() {
  if (registered_) {
    io_uring_unregister_buffers(&ring_);
    registered_ = false;
  }
  region_registered_ = false;
  auto build = [this](bool with_region) {
    iovecs_.clear();
    if (options_.register_staging && staging_.size() > 0) iovecs_.push_back({staging_.data(), staging_.size()});
    if (with_region) {
      for (uint64_t at = 0; at < region_.size(); at += kMaxRegisterChunk) {
        uint64_t len = std::min<uint64_t>(kMaxRegisterChunk, region_.size() - at);
        iovecs_.push_back({region_.data() + at, len});
      }
    }
  };
  bool want_region = !region_.empty();
  build(want_region);
  if (iovecs_.empty()) return true;
  int r = io_uring_register_buffers(&ring_, iovecs_.data(), static_cast<unsigned>(iovecs_.size()));
  if (r == 0) {
    registered_ = true;
    region_registered_ = want_region;
    return true;
  }
  ++stats_.registration_failures;
  if (want_region) {
    build(false);  // keep at least the staging area on the fast path
    if (!iovecs_.empty() &&
        io_uring_register_buffers(&ring_, iovecs_.data(), static_cast<unsigned>(iovecs_.size())) == 0) {
      registered_ = true;
    } else if (!iovecs_.empty()) {
      ++stats_.registration_failures;
    }
  }
  if (!registered_) iovecs_.clear();
  return false;
}

bool UringReader::register_buffer(std::span<std::byte> region) {
  std::lock_guard lock(mutex_);
  if (ops_in_kernel_ > 0 || outstanding_ > 0) {
    throw Error(ErrorCode::internal, "register_buffer called with " + std::to_string(outstanding_) +
                                         " reads in flight on '" + path_ + "'");
  }
  region_ = region;
  bool ok = register_all_locked();
  return ok && !region.empty();
}

bool UringReader::staging_registered() const {
  std::lock_guard lock(mutex_);
  return registered_ && options_.register_staging && staging_.size() > 0;
}

bool UringReader::region_registered() const {
  std::lock_guard lock(mutex_);
  return region_registered_;
}

UringStats UringReader::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace sluice::io
