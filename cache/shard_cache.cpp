#include "cache/shard_cache.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "common/units.h"

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

void CacheCounters::add(const CacheCounters& o) {
  hits += o.hits;
  misses += o.misses;
  bytes_read += o.bytes_read;
  evictions += o.evictions;
  reads_landed += o.reads_landed;
  read_ns += o.read_ns;
  read_ns_max = std::max(read_ns_max, o.read_ns_max);
  io_wait_ns += o.io_wait_ns;
  prefetches += o.prefetches;
}

// ---- Pin ----

ShardCache::Pin& ShardCache::Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = other.cache_;
    slot_ = other.slot_;
    key_ = other.key_;
    other.cache_ = nullptr;
  }
  return *this;
}

std::span<const std::byte> ShardCache::Pin::bytes() const {
  if (cache_ == nullptr) return {};
  const Slot& s = cache_->slots_[slot_];
  return {s.data, cache_->plan_.classes[s.size_class].slot_bytes};
}

std::span<const std::byte> ShardCache::Pin::tensor(size_t index) const {
  if (cache_ == nullptr) return {};
  const ShardExtent& e = cache_->extents_of_layer_[key_.layer].at(index);
  return {cache_->slots_[slot_].data + e.slot_offset, e.length};
}

void ShardCache::Pin::release() {
  if (cache_ != nullptr) {
    cache_->release(slot_);
    cache_ = nullptr;
  }
}

// ---- ShardCache ----

ShardCache::ShardCache(ShardLayout layout, io::Reader& reader, ShardCacheOptions options)
    : layout_(std::move(layout)), reader_(reader), options_(std::move(options)) {
  validate_layout(layout_, reader_.file_size());
  if (!options_.checksums.empty() && options_.checksums.size() != layout_.n_shards()) {
    throw Error(ErrorCode::invalid_argument, "checksum manifest has " + std::to_string(options_.checksums.size()) +
                                                 " entries for " + std::to_string(layout_.n_shards()) + " shards");
  }
  plan_ = plan_cache(layout_, options_.budget_bytes);
  policy_ = make_policy(options_.policy, options_.policy_options);
  policy_->reset({layout_.n_layer(), layout_.n_expert, layout_.n_expert_used, plan_.total_slots()});
  arena_ = std::make_unique<Arena>(plan_.arena_bytes);

  for (uint32_t l = 0; l < layout_.n_layer(); ++l) extents_of_layer_.push_back(shard_extents(layout_, {l, 0}));
  slots_.resize(plan_.total_slots());
  class_slots_.resize(plan_.classes.size());
  free_slots_.resize(plan_.classes.size());
  uint32_t next = 0;
  for (uint32_t c = 0; c < plan_.classes.size(); ++c) {
    const SizeClass& sc = plan_.classes[c];
    for (uint64_t n = 0; n < sc.n_slots; ++n, ++next) {
      slots_[next].size_class = c;
      slots_[next].data = arena_->data() + sc.arena_offset + n * sc.slot_bytes;
      class_slots_[c].push_back(next);
    }
    free_slots_[c].assign(class_slots_[c].rbegin(), class_slots_[c].rend());
  }
  slot_of_.assign(layout_.n_shards(), -1);
  counters_.resize(layout_.n_layer());
  size_t max_tensors = 0;
  for (const auto& l : layout_.layers) max_tensors = std::max(max_tensors, l.tensors.size());
  requests_.reserve(max_tensors);
  candidates_.reserve(slots_.size());
  candidate_slots_.reserve(slots_.size());
}

ShardCache::~ShardCache() {
  // Reads still in flight write into the arena: let them land before it is unmapped.
  try {
    std::unique_lock lock(mutex_);
    for (;;) {
      bool pending = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pending > 0; });
      if (!pending) break;
      if (!reaping_) {
        drive_io_locked(lock);
      } else {
        landed_.wait(lock);
      }
    }
  } catch (...) {
  }
}

void ShardCache::check_key(ShardKey key) const {
  if (key.layer >= layout_.n_layer() || key.expert >= layout_.n_expert) {
    throw Error(ErrorCode::invalid_argument, to_string(key) + " is outside the model (" +
                                                 std::to_string(layout_.n_layer()) + " layers x " +
                                                 std::to_string(layout_.n_expert) + " experts)");
  }
}

void ShardCache::begin_token() {
  std::lock_guard lock(mutex_);
  ++tokens_;
  policy_->on_token();
}

int64_t ShardCache::reserve_locked(std::unique_lock<std::mutex>& lock, ShardKey key, bool speculative) {
  const uint32_t cls = plan_.class_of_layer[key.layer];
  for (;;) {
    if (!free_slots_[cls].empty()) {
      uint32_t s = free_slots_[cls].back();
      free_slots_[cls].pop_back();
      return s;
    }
    candidates_.clear();
    candidate_slots_.clear();
    bool abandoned = false;  // unpinned but still reading (a prefetch): will become a candidate
    uint64_t pinned = 0;
    for (uint32_t s : class_slots_[cls]) {
      const Slot& x = slots_[s];
      if (x.pins > 0) {
        ++pinned;
      } else if (x.state == State::ready) {
        candidates_.push_back(x.key);
        candidate_slots_.push_back(s);
      } else if (x.state == State::reading) {
        abandoned = true;
      }
    }
    if (!candidates_.empty()) {
      size_t v = policy_->choose_victim(candidates_, key);
      if (v >= candidates_.size()) {
        throw Error(ErrorCode::internal, "policy '" + std::string(policy_->name()) + "' chose victim " +
                                             std::to_string(v) + " of " + std::to_string(candidates_.size()));
      }
      uint32_t s = candidate_slots_[v];
      Slot& x = slots_[s];
      policy_->on_evict(x.key);
      ++counters_[x.key.layer].evictions;
      slot_of_[shard_index(x.key, layout_.n_expert)] = -1;
      x.in_table = false;
      x.state = State::free;
      return s;
    }
    if (speculative) return -1;
    if (abandoned) {
      if (!reaping_) {
        drive_io_locked(lock);
      } else {
        landed_.wait(lock);
      }
      continue;
    }
    const SizeClass& sc = plan_.classes[cls];
    throw Error(ErrorCode::budget,
                "cannot load " + to_string(key) + ": all " + std::to_string(sc.n_slots) + " cache slots of " +
                    human_bytes(sc.slot_bytes) + " (the size class of layer " + std::to_string(key.layer) +
                    ") are pinned (" + std::to_string(pinned) + " pins held); the expert-cache budget of " +
                    human_bytes(options_.budget_bytes) + " holds " + std::to_string(sc.n_slots) +
                    " of them; release pins or raise the budget to at least " +
                    human_bytes(plan_.arena_bytes + sc.slot_bytes));
  }
}

void ShardCache::issue_locked(uint32_t slot) {
  Slot& x = slots_[slot];
  const auto& tensors = layout_.layers[x.key.layer].tensors;
  const auto& ext = extents_of_layer_[x.key.layer];
  requests_.clear();
  uint64_t total = 0;
  for (size_t i = 0; i < ext.size(); ++i) {
    uint64_t offset = tensors[i].file_offset + x.key.expert * tensors[i].expert_stride;
    requests_.push_back({offset, ext[i].length, x.data + ext[i].slot_offset, (static_cast<uint64_t>(slot) << 16) | i});
    total += ext[i].length;
  }
  x.state = State::reading;
  x.error.clear();
  x.pending = static_cast<uint32_t>(requests_.size());
  x.issued = std::chrono::steady_clock::now();
  counters_[x.key.layer].bytes_read += total;
  try {
    reader_.submit(requests_);
  } catch (const Error& e) {
    x.pending = 0;
    x.state = State::failed;
    x.error_code = e.code();
    x.error = to_string(x.key) + ": cannot submit reads: " + e.what();
    if (x.speculative) --speculative_in_flight_, x.speculative = false;
    if (x.pins == 0) free_slot_locked(slot);
  }
}

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
  const bool verify = !options_.checksums.empty() || static_cast<bool>(options_.verify);
  if (verify && !landed_scratch_.empty()) {
    std::vector<uint32_t> landed = landed_scratch_;
    lock.unlock();
    std::vector<std::pair<ErrorCode, std::string>> verdicts(landed.size(), {ErrorCode::io_error, ""});
    for (size_t i = 0; i < landed.size(); ++i) {
      const Slot& x = slots_[landed[i]];
      if (!x.error.empty()) continue;
      const auto& ext = extents_of_layer_[x.key.layer];
      size_t idx = shard_index(x.key, layout_.n_expert);
      try {
        if (!options_.checksums.empty() && options_.checksums[idx] != 0) {
          std::span<const std::byte> bytes(x.data, plan_.classes[x.size_class].slot_bytes);
          uint64_t got = shard_checksum(bytes, ext);
          if (got != options_.checksums[idx]) {
            verdicts[i] = {ErrorCode::corrupt_data, to_string(x.key) + ": XXH3-64 of the landed bytes is " + hex64(got) +
                                                        " but the manifest says " + hex64(options_.checksums[idx]) +
                                                        " (tensor '" + layout_.layers[x.key.layer].tensors[0].name +
                                                        "' and siblings, first at offset " +
                                                        std::to_string(layout_.layers[x.key.layer].tensors[0].file_offset +
                                                                       x.key.expert * layout_.layers[x.key.layer].tensors[0].expert_stride) +
                                                        ")"};
            continue;
          }
        }
        if (options_.verify) {
          options_.verify(x.key, std::span<const std::byte>(x.data, plan_.classes[x.size_class].slot_bytes));
        }
      } catch (const Error& e) {
        verdicts[i] = {e.code(), to_string(x.key) + ": " + e.what()};
      }
    }
    lock.lock();
    for (size_t i = 0; i < landed.size(); ++i) {
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
  if (x.speculative) {
    --speculative_in_flight_;
    x.speculative = false;
  }
  if (!x.error.empty()) {
    x.state = State::failed;
    if (x.pins == 0) free_slot_locked(slot);
  } else {
    x.state = State::ready;
  }
}

void ShardCache::free_slot_locked(uint32_t slot) {
  Slot& x = slots_[slot];
  if (x.in_table) {
    policy_->on_evict(x.key);
    slot_of_[shard_index(x.key, layout_.n_expert)] = -1;
    x.in_table = false;
  }
  x.state = State::free;
  free_slots_[x.size_class].push_back(slot);
}

void ShardCache::release(uint32_t slot) {
  std::lock_guard lock(mutex_);
  Slot& x = slots_[slot];
  if (x.pins > 0) --x.pins;
  if (x.pins == 0 && x.state == State::failed && x.pending == 0) free_slot_locked(slot);
}

ShardCache::Pin ShardCache::acquire(ShardKey key) {
  auto pins = acquire_all(std::span<const ShardKey>(&key, 1));
  return std::move(pins[0]);
}

std::vector<ShardCache::Pin> ShardCache::acquire_all(std::span<const ShardKey> keys) {
  std::unique_lock lock(mutex_);
  for (size_t i = 0; i < keys.size(); ++i) {
    check_key(keys[i]);
    for (size_t j = 0; j < i; ++j) {
      if (keys[j] == keys[i]) {
        throw Error(ErrorCode::invalid_argument, "acquire_all: " + to_string(keys[i]) + " is listed twice");
      }
    }
  }
  std::vector<int64_t> held(keys.size(), -1);
  std::vector<uint8_t> was_resident(keys.size(), 0);
  // Pin what is resident first, so this step's misses cannot evict this step's hits.
  for (size_t i = 0; i < keys.size(); ++i) {
    int64_t s = slot_of_[shard_index(keys[i], layout_.n_expert)];
    if (s >= 0 && slots_[s].state != State::failed) {
      ++slots_[s].pins;
      held[i] = s;
      was_resident[i] = 1;
    }
  }
  try {
    for (size_t i = 0; i < keys.size(); ++i) {
      const ShardKey key = keys[i];
      const size_t idx = shard_index(key, layout_.n_expert);
      CacheCounters& c = counters_[key.layer];
      if (was_resident[i]) {
        ++c.hits;
        policy_->on_access(key, true);
        continue;
      }
      ++c.misses;
      if (slot_of_[idx] >= 0) {  // a failed entry still pinned elsewhere: detach it, read afresh
        Slot& old = slots_[slot_of_[idx]];
        policy_->on_evict(key);
        old.in_table = false;
        slot_of_[idx] = -1;
      }
      int64_t s = reserve_locked(lock, key, false);
      if (slot_of_[idx] >= 0 && slots_[slot_of_[idx]].state != State::failed) {
        // Another thread loaded it while we waited for a slot: use theirs.
        free_slots_[slots_[s].size_class].push_back(static_cast<uint32_t>(s));
        s = slot_of_[idx];
        ++slots_[s].pins;
        held[i] = s;
        policy_->on_access(key, true);
        continue;
      }
      Slot& x = slots_[s];
      x.key = key;
      x.pins = 1;
      x.speculative = false;
      x.in_table = true;
      slot_of_[idx] = s;
      held[i] = s;
      policy_->on_insert(key);
      policy_->on_access(key, false);
      issue_locked(static_cast<uint32_t>(s));
    }
  } catch (...) {
    for (int64_t s : held) {
      if (s < 0) continue;
      Slot& x = slots_[s];
      if (x.pins > 0) --x.pins;
      if (x.pins == 0 && x.state == State::failed && x.pending == 0) free_slot_locked(static_cast<uint32_t>(s));
    }
    throw;
  }
  std::vector<Pin> pins;
  pins.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) pins.push_back(Pin(this, static_cast<uint32_t>(held[i]), keys[i]));
  return pins;
}

bool ShardCache::prefetch(ShardKey key) {
  std::unique_lock lock(mutex_);
  check_key(key);
  const size_t idx = shard_index(key, layout_.n_expert);
  if (slot_of_[idx] >= 0 || speculative_in_flight_ >= options_.max_speculative_in_flight) return false;
  int64_t s = reserve_locked(lock, key, true);
  if (s < 0) return false;
  Slot& x = slots_[s];
  x.key = key;
  x.pins = 0;
  x.speculative = true;
  x.in_table = true;
  slot_of_[idx] = s;
  ++speculative_in_flight_;
  ++counters_[key.layer].prefetches;
  policy_->on_insert(key);
  issue_locked(static_cast<uint32_t>(s));
  return true;
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

bool ShardCache::is_resident(ShardKey key) const {
  std::lock_guard lock(mutex_);
  check_key(key);
  int64_t s = slot_of_[shard_index(key, layout_.n_expert)];
  return s >= 0 && slots_[s].state != State::failed;
}

CacheStats ShardCache::stats() const {
  std::lock_guard lock(mutex_);
  CacheStats st;
  st.layers = counters_;
  for (const auto& c : counters_) st.total.add(c);
  st.tokens = tokens_;
  st.arena_bytes = plan_.arena_bytes;
  for (const Slot& x : slots_) {
    if (x.state == State::free) continue;
    ++st.resident_shards;
    st.resident_bytes += plan_.classes[x.size_class].slot_bytes;
    if (x.pins > 0) ++st.pinned_shards;
  }
  return st;
}

}  // namespace sluice::cache
