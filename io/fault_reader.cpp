#include "io/fault_reader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "common/error.h"

namespace sluice::io {

namespace {

constexpr unsigned kMaxEagainsPerExtent = 8;

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t extent_key(const ReadRequest& r) { return mix(r.offset ^ mix(r.length)); }

}  // namespace

FaultOptions parse_fault_options(std::string_view spec, std::string_view what) {
  FaultOptions o;
  auto bad = [&](std::string_view item, const char* why) {
    return Error(ErrorCode::invalid_argument, std::string(what) + ": " + why + " in '" + std::string(item) +
                                                  "' (keys: seed, short, eagain, delay, eio, eio_always, flip, flip_once, fail_at, uring_fail)");
  };
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw bad(item, "expected key=value");
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "uring_fail") {
      if (value != "0" && value != "1") throw bad(item, "expected 0 or 1");
      o.fail_uring_setup = value == "1";
      continue;
    }
    if (key == "seed" || key == "fail_at") {
      uint64_t v = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || ptr != value.data() + value.size()) throw bad(item, "expected an integer");
      if (key == "seed") o.seed = v;
      else o.fail_offsets.push_back(v);
      continue;
    }
    double rate = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), rate);
    if (ec != std::errc() || ptr != value.data() + value.size() || !(rate >= 0 && rate <= 1)) {
      throw bad(item, "expected a rate in [0, 1]");
    }
    if (key == "short") o.short_read_rate = rate;
    else if (key == "eagain") o.eagain_rate = rate;
    else if (key == "delay") o.delay_rate = rate;
    else if (key == "eio") o.transient_eio_rate = rate;
    else if (key == "eio_always") o.persistent_eio_rate = rate;
    else if (key == "flip") o.bit_flip_rate = rate;
    else if (key == "flip_once") o.first_read_flip_rate = rate;
    else throw bad(item, "unknown key");
  }
  return o;
}

FaultInjectingReader::FaultInjectingReader(std::unique_ptr<Reader> inner, FaultOptions options)
    : inner_(std::move(inner)), options_(std::move(options)), rng_(options_.seed) {
  if (!inner_) throw Error(ErrorCode::invalid_argument, "FaultInjectingReader needs an inner reader");
  backend_ = "faulty-" + std::string(inner_->backend());
}

FaultInjectingReader::~FaultInjectingReader() = default;

uint32_t FaultInjectingReader::alloc_slot_locked(const ReadRequest& r, bool sync) {
  uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[index] = Slot{};
  slots_[index].original = r;
  slots_[index].sync = sync;
  return index;
}

ReadRequest FaultInjectingReader::next_piece_locked(uint32_t index) {
  Slot& s = slots_[index];
  uint64_t remaining = s.original.length - s.done;
  uint64_t piece = remaining;
  if (remaining > 1 && options_.short_read_rate > 0 && roll() < options_.short_read_rate) {
    piece = std::uniform_int_distribution<uint64_t>(1, remaining - 1)(rng_);
    ++counts_.short_reads;
  }
  s.piece = piece;
  return ReadRequest{s.original.offset + s.done, piece, s.original.dst + s.done, index};
}

bool FaultInjectingReader::persistent_failure(const ReadRequest& r) const {
  if (std::find(options_.fail_offsets.begin(), options_.fail_offsets.end(), r.offset) !=
      options_.fail_offsets.end()) {
    return true;
  }
  if (options_.persistent_eio_rate <= 0) return false;
  double u = static_cast<double>(mix(extent_key(r) ^ options_.seed) >> 11) * 0x1.0p-53;
  return u < options_.persistent_eio_rate;
}

void FaultInjectingReader::finish_locked(uint32_t index, int64_t result) {
  Slot& s = slots_[index];
  if (s.sync) {
    s.finished = true;
    s.result = result;
    return;  // read_sync frees the slot
  }
  Completion c{s.original, result};
  free_slots_.push_back(index);
  if (options_.delay_rate > 0 && roll() < options_.delay_rate) {
    ++counts_.delays;
    held_.push_back(Held{c, 1 + static_cast<unsigned>(rng_() % 4)});
  } else {
    ready_.push_back(c);
  }
}

void FaultInjectingReader::handle_inner_locked(const Completion& c) {
  auto index = static_cast<uint32_t>(c.request.tag);
  Slot& s = slots_[index];
  if (c.result < 0) {
    finish_locked(index, c.result);  // the inner reader's own failure passes through
    return;
  }
  if (options_.eagain_rate > 0 && s.eagains < kMaxEagainsPerExtent && roll() < options_.eagain_rate) {
    ++s.eagains;
    ++counts_.eagains;
    batch_.push_back(c.request);  // as a reader would on -EAGAIN: issue the same read again
    return;
  }
  s.done += static_cast<uint64_t>(c.result);
  if (s.done < s.original.length) {
    batch_.push_back(next_piece_locked(index));
    return;
  }
  const ReadRequest& r = s.original;
  if (persistent_failure(r)) {
    ++counts_.persistent_eios;
    finish_locked(index, -EIO);
    return;
  }
  if (options_.transient_eio_rate > 0 && seen_extents_.insert(extent_key(r)).second &&
      roll() < options_.transient_eio_rate) {
    ++counts_.transient_eios;
    finish_locked(index, -EIO);
    return;
  }
  const bool flip = r.length > 0 && ((options_.bit_flip_rate > 0 && roll() < options_.bit_flip_rate) ||
                                      (options_.first_read_flip_rate > 0 && flip_seen_.insert(extent_key(r)).second &&
                                       roll() < options_.first_read_flip_rate));
  if (flip) {
    uint64_t at = std::uniform_int_distribution<uint64_t>(0, r.length - 1)(rng_);
    r.dst[at] ^= static_cast<std::byte>(1u << (rng_() % 8));
    ++counts_.bit_flips;
  }
  finish_locked(index, static_cast<int64_t>(r.length));
}

void FaultInjectingReader::pump_inner_locked(size_t min_complete) {
  Completion buf[64];
  for (;;) {
    if (!batch_.empty()) {
      std::vector<ReadRequest> batch;
      batch.swap(batch_);
      inner_->submit(batch);
    }
    size_t inner_flight = inner_->in_flight();
    if (inner_flight == 0) return;
    size_t n = inner_->reap(buf, std::min(min_complete, inner_flight));
    for (size_t i = 0; i < n; ++i) handle_inner_locked(buf[i]);
    if (batch_.empty()) return;
    min_complete = 0;  // reissued pieces go out at once; the caller's loop decides on waiting
  }
}

void FaultInjectingReader::submit(std::span<const ReadRequest> requests) {
  std::lock_guard lock(mutex_);
  for (const ReadRequest& r : requests) {
    uint32_t index = alloc_slot_locked(r, false);
    ++outstanding_;
    batch_.push_back(next_piece_locked(index));
  }
  if (!batch_.empty()) {
    std::vector<ReadRequest> batch;
    batch.swap(batch_);
    inner_->submit(batch);
  }
}

size_t FaultInjectingReader::reap(std::span<Completion> out, size_t min_complete) {
  std::lock_guard lock(mutex_);
  if (min_complete > outstanding_) {
    throw Error(ErrorCode::internal, "reap asked for " + std::to_string(min_complete) +
                                         " completions with only " + std::to_string(outstanding_) +
                                         " reads in flight");
  }
  // Held completions age by one reap call each.
  for (auto it = held_.begin(); it != held_.end();) {
    if (--it->reaps_left == 0) {
      ready_.push_back(it->completion);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  for (;;) {
    pump_inner_locked(0);
    if (ready_.size() >= min_complete) break;
    if (inner_->in_flight() > 0 || !batch_.empty()) {
      pump_inner_locked(1);
    } else if (!held_.empty()) {
      ready_.push_back(held_.front().completion);  // never block on a held completion
      held_.pop_front();
    } else {
      throw Error(ErrorCode::internal, "fault reader has " + std::to_string(outstanding_) +
                                           " reads in flight but none pending");
    }
  }
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) {
    out[n++] = ready_.front();
    ready_.pop_front();
    --outstanding_;
  }
  return n;
}

size_t FaultInjectingReader::in_flight() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

void FaultInjectingReader::read_sync(uint64_t offset, std::span<std::byte> dst) {
  std::lock_guard lock(mutex_);
  uint32_t index = alloc_slot_locked(ReadRequest{offset, dst.size(), dst.data(), 0}, true);
  batch_.push_back(next_piece_locked(index));
  while (!slots_[index].finished) pump_inner_locked(1);
  int64_t result = slots_[index].result;
  free_slots_.push_back(index);
  if (result < 0) {
    throw Error(ErrorCode::io_error, describe_read_failure(inner_->path(), offset, dst.size(), result));
  }
}

bool FaultInjectingReader::register_buffer(std::span<std::byte> region) {
  std::lock_guard lock(mutex_);
  return inner_->register_buffer(region);
}

FaultCounts FaultInjectingReader::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace sluice::io
