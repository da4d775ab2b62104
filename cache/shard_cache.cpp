// ShardCache, table side: construction, reservation and eviction, issuing reads, pins, stats.
// The landing side (reaping, verification, waiting) is in shard_cache_landing.cpp.
#include "cache/shard_cache.h"

#include <algorithm>
#include <array>

#include "common/units.h"

namespace sluice::cache {

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
  corrupt_extents += o.corrupt_extents;
  prefetch_hits += o.prefetch_hits;
  prefetch_hits_landed += o.prefetch_hits_landed;
  prefetch_unused_evicted += o.prefetch_unused_evicted;
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
  if (index >= cache_->layout_.layers[key_.layer].tensors.size()) return {};
  ShardExtent e = shard_extent(cache_->layout_, key_, static_cast<uint32_t>(index), cache_->alignment_);
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
  verifying_ = static_cast<bool>(options_.verify);
  for (const auto& l : layout_.layers) {
    for (const auto& t : l.tensors) verifying_ = verifying_ || !t.digests.empty();
  }
  alignment_ = usable_alignment(reader_.alignment());
  plan_ = plan_cache(layout_, options_.budget_bytes, alignment_);
  policy_ = make_policy(options_.policy, options_.policy_options);
  policy_->reset({layout_.n_layer(), layout_.n_expert, layout_.n_expert_used, plan_.total_slots()});
  arena_ = std::make_unique<Arena>(plan_.arena_bytes);

  lay_out_slots();
  slot_of_.assign(layout_.n_shards(), -1);
  counters_.resize(layout_.n_layer());
  size_t max_tensors = 0;
  for (const auto& l : layout_.layers) max_tensors = std::max(max_tensors, l.tensors.size());
  requests_.reserve(max_tensors);
  extent_scratch_.reserve(max_tensors);
  candidates_.reserve(slots_.size());
  candidate_slots_.reserve(slots_.size());
}

ShardCache::~ShardCache() {
  // Reads still in flight write into the arena: let them land before it is unmapped.
  try {
    drain();
    reader_.register_buffer({});
  } catch (...) {
  }
}

void ShardCache::drain() {
  std::unique_lock lock(mutex_);
  wait_no_reads_locked(lock);
}

void ShardCache::wait_no_reads_locked(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    bool pending = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pending > 0; });
    if (!pending) break;
    if (!reaping_) {
      drive_io_locked(lock);
    } else {
      landed_.wait(lock);
    }
  }
}

void ShardCache::extents_of(ShardKey key, std::vector<ShardExtent>& out) const {
  out.clear();
  const uint32_t n = static_cast<uint32_t>(layout_.layers[key.layer].tensors.size());
  for (uint32_t i = 0; i < n; ++i) out.push_back(shard_extent(layout_, key, i, alignment_));
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

int64_t ShardCache::reserve_locked(std::unique_lock<std::mutex>& lock, ShardKey key, bool speculative,
                                   bool keep_prefetched) {
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
      } else if (x.state == State::ready && !(keep_prefetched && x.prefetched_unused)) {
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
      if (x.prefetched_unused) ++counters_[x.key.layer].prefetch_unused_evicted;
      x.prefetched_unused = false;
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
  extents_of(x.key, extent_scratch_);
  requests_.clear();
  uint64_t total = 0;
  for (size_t i = 0; i < extent_scratch_.size(); ++i) {
    const ShardExtent& e = extent_scratch_[i];
    requests_.push_back({e.file_offset, e.length, x.data + e.slot_offset, (static_cast<uint64_t>(slot) << 16) | i});
    total += e.length;
  }
  x.state = State::reading;
  x.error.clear();
  x.pending = static_cast<uint32_t>(requests_.size());
  x.read_bytes = total;
  read_started_locked(x);
  counters_[x.key.layer].bytes_read += total;
  try {
    reader_.submit(requests_);
  } catch (const Error& e) {
    x.pending = 0;
    x.state = State::failed;
    x.error_code = e.code();
    x.error = to_string(x.key) + ": cannot submit reads: " + e.what();
    read_ended_locked(x);
    if (x.pins == 0) free_slot_locked(slot);
  }
}

void ShardCache::read_started_locked(Slot& x) {
  x.issued = std::chrono::steady_clock::now();
  if (reads_in_flight_++ == 0) busy_since_ = x.issued;
  if (x.speculative) {
    ++speculative_in_flight_;
    speculative_bytes_in_flight_ += x.read_bytes;
  }
}

void ShardCache::read_ended_locked(Slot& x) {
  if (reads_in_flight_ > 0 && --reads_in_flight_ == 0) {
    io_busy_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - busy_since_).count());
  }
  if (x.speculative) {
    --speculative_in_flight_;
    speculative_bytes_in_flight_ -= x.read_bytes;
    x.speculative = false;
  }
}

void ShardCache::free_slot_locked(uint32_t slot) {
  Slot& x = slots_[slot];
  x.prefetched_unused = false;
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
  Pin pin;
  acquire_all(std::span<const ShardKey>(&key, 1), std::span<Pin>(&pin, 1));
  return pin;
}

std::vector<ShardCache::Pin> ShardCache::acquire_all(std::span<const ShardKey> keys) {
  std::vector<Pin> pins(keys.size());
  acquire_all(keys, pins);
  return pins;
}

void ShardCache::acquire_all(std::span<const ShardKey> keys, std::span<Pin> out) {
  if (out.size() != keys.size()) {
    throw Error(ErrorCode::invalid_argument, "acquire_all: " + std::to_string(keys.size()) + " keys but room for " +
                                                 std::to_string(out.size()) + " pins");
  }
  for (Pin& p : out) p.release();
  // Per-call bookkeeping on the stack for the usual top-k (no allocation per token).
  constexpr size_t kInline = 64;
  std::array<int64_t, kInline> held_inline;
  std::array<uint8_t, kInline> resident_inline;
  std::vector<int64_t> held_heap;
  std::vector<uint8_t> resident_heap;
  std::span<int64_t> held;
  std::span<uint8_t> was_resident;
  if (keys.size() <= kInline) {
    held = std::span<int64_t>(held_inline.data(), keys.size());
    was_resident = std::span<uint8_t>(resident_inline.data(), keys.size());
  } else {
    held_heap.resize(keys.size());
    resident_heap.resize(keys.size());
    held = held_heap;
    was_resident = resident_heap;
  }
  std::fill(held.begin(), held.end(), -1);
  std::fill(was_resident.begin(), was_resident.end(), 0);
  std::unique_lock lock(mutex_);
  for (size_t i = 0; i < keys.size(); ++i) {
    check_key(keys[i]);
    for (size_t j = 0; j < i; ++j) {
      if (keys[j] == keys[i]) {
        throw Error(ErrorCode::invalid_argument, "acquire_all: " + to_string(keys[i]) + " is listed twice");
      }
    }
  }
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
        Slot& x = slots_[held[i]];
        if (x.prefetched_unused) {
          x.prefetched_unused = false;
          ++c.prefetch_hits;
          if (x.state == State::ready) ++c.prefetch_hits_landed;
        }
        if (x.speculative) {  // now a demand read: it no longer counts against the speculative caps
          --speculative_in_flight_;
          speculative_bytes_in_flight_ -= x.read_bytes;
          x.speculative = false;
        }
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
      x.prefetched_unused = false;
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
  lock.unlock();
  for (size_t i = 0; i < keys.size(); ++i) out[i] = Pin(this, static_cast<uint32_t>(held[i]), keys[i]);
}

bool ShardCache::prefetch(ShardKey key) { return speculate(key, true); }

bool ShardCache::read_ahead(ShardKey key) { return speculate(key, false); }

bool ShardCache::speculate(ShardKey key, bool capped) {
  std::unique_lock lock(mutex_);
  check_key(key);
  const size_t idx = shard_index(key, layout_.n_expert);
  if (slot_of_[idx] >= 0) return false;
  if (capped && speculative_in_flight_ >= options_.max_speculative_in_flight) return false;
  if (capped && options_.max_speculative_bytes_in_flight > 0 && speculative_in_flight_ > 0) {
    uint64_t bytes = 0;
    extents_of(key, extent_scratch_);
    for (const ShardExtent& e : extent_scratch_) bytes += e.length;
    if (speculative_bytes_in_flight_ + bytes > options_.max_speculative_bytes_in_flight) return false;
  }
  int64_t s = reserve_locked(lock, key, true, !capped);
  if (s < 0) return false;
  Slot& x = slots_[s];
  x.key = key;
  x.pins = 0;
  x.speculative = true;
  x.prefetched_unused = true;
  x.in_table = true;
  slot_of_[idx] = s;
  ++counters_[key.layer].prefetches;
  policy_->on_insert(key);
  issue_locked(static_cast<uint32_t>(s));
  return true;
}

ShardCache::Pin ShardCache::preload(ShardKey key) {
  std::unique_lock lock(mutex_);
  check_key(key);
  const size_t idx = shard_index(key, layout_.n_expert);
  const uint32_t cls = plan_.class_of_layer[key.layer];
  if (slot_of_[idx] >= 0 || free_slots_[cls].empty()) return {};
  const uint32_t s = free_slots_[cls].back();
  free_slots_[cls].pop_back();
  Slot& x = slots_[s];
  x.key = key;
  x.pins = 1;
  x.speculative = false;
  x.in_table = true;
  slot_of_[idx] = s;
  policy_->on_insert(key);
  issue_locked(s);
  return Pin(this, s, key);
}

bool ShardCache::is_resident(ShardKey key) const {
  std::lock_guard lock(mutex_);
  check_key(key);
  int64_t s = slot_of_[shard_index(key, layout_.n_expert)];
  return s >= 0 && slots_[s].state != State::failed;
}

uint32_t ShardCache::demand_reads_in_flight() const {
  std::lock_guard lock(mutex_);
  return reads_in_flight_ - speculative_in_flight_;
}

CacheStats ShardCache::stats() const {
  std::lock_guard lock(mutex_);
  CacheStats st;
  st.layers = counters_;
  for (const auto& c : counters_) st.total.add(c);
  st.tokens = tokens_;
  st.arena_bytes = plan_.arena_bytes;
  st.io_busy_ns = io_busy_ns_;
  if (reads_in_flight_ > 0) {
    st.io_busy_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - busy_since_).count());
  }
  st.speculative_in_flight = speculative_in_flight_;
  st.speculative_bytes_in_flight = speculative_bytes_in_flight_;
  st.lent_bytes = lent_ ? lendable_bytes_ : 0;
  for (const Slot& x : slots_) {
    if (x.state == State::free || x.state == State::lent) continue;
    ++st.resident_shards;
    st.resident_bytes += plan_.classes[x.size_class].slot_bytes;
    if (x.pins > 0) ++st.pinned_shards;
  }
  return st;
}

}  // namespace sluice::cache
