// ShardCache, landing side: reaping completions, verifying digests, and waiting for shards.
#include <algorithm>
#include <array>
#include <cstdio>

#include "cache/shard_cache.h"

namespace sluice::cache {
namespace {

uint64_t ns_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

void ShardCache::drive_io_locked(std::unique_lock<std::mutex>& lock) {
  reaping_ = true;
  lock.unlock();
  std::array<io::Completion, 64> done;
  size_t n = 0;
  try {
    n = reader_.reap(done, 1);
  } catch (...) {
    lock.lock();
    reaping_ = false;
    landed_.notify_all();
    throw;
  }
  lock.lock();
  landed_scratch_.clear();
  for (size_t i = 0; i < n; ++i) {
    const io::Completion& c = done[i];
    uint32_t slot = static_cast<uint32_t>(c.request.tag >> 16);
    uint32_t ext = static_cast<uint32_t>(c.request.tag & 0xffff);
    Slot& x = slots_[slot];
    if (c.result != static_cast<int64_t>(c.request.length) && x.error.empty()) {
      const TensorSlice& t = layout_.layers[x.key.layer].tensors[ext];
      std::string why = c.result < 0 ? io::describe_read_failure(reader_.path(), c.request.offset, c.request.length,
                                                                 c.result)
                                     : "short read of " + std::to_string(c.result) + " of " +
                                           std::to_string(c.request.length) + " bytes at offset " +
                                           std::to_string(c.request.offset) + " of '" + reader_.path() + "'";
      x.error_code = ErrorCode::io_error;
      x.error = to_string(x.key) + ", tensor '" + t.name + "' (slice at offset " + std::to_string(c.request.offset) +
                ", " + std::to_string(c.request.length) + " bytes): " + why;
    }
    if (x.pending > 0 && --x.pending == 0) landed_scratch_.push_back(slot);
  }
  // Verify outside the lock: the slots stay `reading` (not evictable) and we still hold the
  // reaper role, so nobody else touches them.
  if (verifying_ && !landed_scratch_.empty()) {
    std::vector<uint32_t> landed = landed_scratch_;
    lock.unlock();
    std::vector<std::pair<ErrorCode, std::string>> verdicts(landed.size(), {ErrorCode::io_error, ""});
    std::vector<uint32_t> mismatches(landed.size(), 0);
    for (size_t i = 0; i < landed.size(); ++i) {
      const Slot& x = slots_[landed[i]];
      if (!x.error.empty()) continue;
      try {
        // Every extent is checked (not just up to the first mismatch) so that the count of
        // corrupt extents is exact: fault-injection tests compare it with the flips injected.
        const auto& tensors = layout_.layers[x.key.layer].tensors;
        std::string first_bad;
        for (uint32_t t = 0; t < tensors.size(); ++t) {
          if (tensors[t].digests.empty()) continue;
          const ShardExtent e = shard_extent(layout_, x.key, t, alignment_);
          const uint64_t got = extent_digest({x.data + e.slot_offset, e.length});
          const uint64_t want = tensors[t].digests[x.key.expert];
          if (got != want && mismatches[i]++ == 0) {
            first_bad = "tensor '" + tensors[t].name + "' (slice at offset " + std::to_string(e.file_offset) + ", " +
                        std::to_string(e.length) + " bytes): XXH3-64 of the landed bytes is " + hex64(got) +
                        " but the index says " + hex64(want);
          }
        }
        if (!first_bad.empty()) throw Error(ErrorCode::corrupt_data, first_bad);
        if (options_.verify) {
          options_.verify(x.key, std::span<const std::byte>(x.data, plan_.classes[x.size_class].slot_bytes));
        }
      } catch (const Error& e) {
        verdicts[i] = {e.code(), to_string(x.key) + ", " + e.what()};
      }
    }
    lock.lock();
    for (size_t i = 0; i < landed.size(); ++i) {
      counters_[slots_[landed[i]].key.layer].corrupt_extents += mismatches[i];
      if (!verdicts[i].second.empty()) {
        slots_[landed[i]].error_code = verdicts[i].first;
        slots_[landed[i]].error = verdicts[i].second;
      }
    }
    landed_scratch_ = std::move(landed);
  }
  for (uint32_t slot : landed_scratch_) finish_landed_locked(slot, ++landed_counter_);
  reaping_ = false;
  landed_.notify_all();
}

void ShardCache::finish_landed_locked(uint32_t slot, uint64_t seq) {
  Slot& x = slots_[slot];
  CacheCounters& c = counters_[x.key.layer];
  uint64_t ns = ns_since(x.issued);
  ++c.reads_landed;
  c.read_ns += ns;
  c.read_ns_max = std::max(c.read_ns_max, ns);
  x.landed_seq = seq;
  read_ended_locked(x);
  if (!x.error.empty()) {
    x.state = State::failed;
    if (x.pins == 0) free_slot_locked(slot);
  } else {
    x.state = State::ready;
  }
}

void ShardCache::throw_failed(const Slot& s) const { throw Error(s.error_code, s.error); }

void ShardCache::wait(const Pin& pin) {
  if (!pin || pin.cache_ != this) throw Error(ErrorCode::invalid_argument, "wait: empty or foreign pin");
  std::unique_lock lock(mutex_);
  auto t0 = std::chrono::steady_clock::now();
  bool blocked = false;
  for (;;) {
    const Slot& x = slots_[pin.slot_];
    if (x.state == State::ready || x.state == State::failed) break;
    blocked = true;
    if (!reaping_) {
      drive_io_locked(lock);
    } else {
      landed_.wait(lock);
    }
  }
  if (blocked) counters_[pin.key_.layer].io_wait_ns += ns_since(t0);
  if (slots_[pin.slot_].state == State::failed) throw_failed(slots_[pin.slot_]);
}

bool ShardCache::failed(const Pin& pin) const {
  if (!pin || pin.cache_ != this) return false;
  std::lock_guard lock(mutex_);
  return slots_[pin.slot_].state == State::failed;
}

size_t ShardCache::wait_any(std::span<const Pin> pins) {
  std::unique_lock lock(mutex_);
  auto t0 = std::chrono::steady_clock::now();
  bool blocked = false;
  for (;;) {
    size_t best = SIZE_MAX;
    bool any = false;
    for (size_t i = 0; i < pins.size(); ++i) {
      if (!pins[i] || pins[i].cache_ != this) continue;
      any = true;
      const Slot& x = slots_[pins[i].slot_];
      if (x.state == State::failed) {
        if (blocked) counters_[pins[i].key_.layer].io_wait_ns += ns_since(t0);
        throw_failed(x);
      }
      if (x.state == State::ready && (best == SIZE_MAX || x.landed_seq < slots_[pins[best].slot_].landed_seq)) {
        best = i;
      }
    }
    if (!any) throw Error(ErrorCode::invalid_argument, "wait_any: no pin to wait for");
    if (best != SIZE_MAX) {
      if (blocked) counters_[pins[best].key_.layer].io_wait_ns += ns_since(t0);
      return best;
    }
    blocked = true;
    if (!reaping_) {
      drive_io_locked(lock);
    } else {
      landed_.wait(lock);
    }
  }
}

}  // namespace sluice::cache
