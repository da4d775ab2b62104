// ShardCache: the budgeted expert cache the forward pass reads experts through.
//
// Memory: one Arena sized by plan_cache(layout, budget) (arena.h), carved into fixed slots per
// size class. Nothing else is allocated per shard or per token; the shard table is a dense
// array over all n_layer * n_expert shards.
//
// Life of a shard: free slot -> reserved (before any read is issued: reserve-before-read) ->
// reading (its extents submitted through the io::Reader) -> ready, or failed. A ready slot with
// no pins is an eviction candidate; the EvictionPolicy picks among candidates of the needed
// size class. Pinned or reading slots are never evicted. When no slot can be had, acquire throws
// Error(budget) rather than allocate: the arena is the ceiling.
//
// How the forward pass uses it, per MoE layer (router picked `keys`, K of them):
//
//   cache.begin_token();                          // once per decode step (policy aging)
//   cache.acquire_all(keys, pins);                // pins: K caller-owned Pins, reused per layer;
//                                                 // hits pinned, misses reserved + reads issued
//   for (size_t n = 0; n < keys.size(); ++n) {
//     size_t i = cache.wait_any(pins);            // a landed shard, in completion order
//     run_expert(pins[i].tensor(0), pins[i].tensor(1), pins[i].tensor(2));  // gate, up, down
//     pins[i].release();                          // now evictable
//   }
//
// acquire_all pins every resident shard of the step before loading any missing one, so one
// expert's miss never evicts another expert of the same step. Pins are RAII: dropping one
// releases it. wait/wait_any throw Error(io_error) naming the tensor, expert, file offset and
// errno for a failed read, Error(corrupt_data) when a slice's XXH3-64 differs from its digest; the failed shard
// leaves the table when its last pin goes, so a later acquire retries the read.
//
// IO: the cache owns the reader's asynchronous side (it alone submits and reaps; read_sync from
// set-up code is fine). Completions are reaped by whichever thread waits: one thread at a time
// reaps while the others sleep on a condition variable. Digests (TensorSlice::digests) are
// verified on landing by the reaping thread, outside the lock, before anyone can use the shard.
//
// Prefetch: prefetch(key) starts a speculative load if the shard is absent, a slot is free or
// evictable, and the speculative caps allow it: fewer than max_speculative_in_flight speculative
// loads pending, and their bytes plus this one's within max_speculative_bytes_in_flight (0: no
// byte cap; one load is always allowed when none is pending, so a cap below a shard still lets
// prefetch trickle). It never throws for lack of room and never pins; the policy sees on_insert
// only (no access), so hit/miss statistics count demand accesses. A later acquire of it is a hit.
// Demand reads go first: acquire never waits behind the caps, and the caps bound how many
// speculative reads the device can have queued ahead of a demand read.
// Counters tell how prefetch paid off: prefetch_hits (demand found a prefetched shard; _landed:
// its read had already completed, so the whole read hid behind compute), prefetch_unused_evicted
// (a prefetched shard left the cache before any demand access: wasted IO). io_busy_ns is wall
// time with at least one read in flight; io_wait_ns over it is the share of IO not hidden.
//
// Lending (core/engine.h, "Lending"): the prefill batch's scratch and the arena take turns with
// part of the budget. ShardCacheOptions::lendable_bytes designates whole slots beyond the working
// sets, in each size class in proportion to its slots beyond the working set, and places them
// after all the others: the arena's head alone is offered to the reader (register_buffer), once,
// so lending never re-registers (registering 1.7 GiB took 1.3 s on the README's file). lend()
// waits for the reads in flight, evicts what the designated slots hold, takes them out of use and
// returns their pages to the kernel (release_pages: a registered page would stay pinned and free
// nothing); the caller may then touch that many bytes elsewhere. reclaim() puts them back, empty.
// No pin may be held across either.
//
// Thread safety: all methods may be called from any thread; Pin objects may move between
// threads. One mutex guards the table; reads are submitted under it. The reader must outlive
// the cache, and every Pin must be gone before the cache is destroyed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cache/arena.h"
#include "cache/eviction_policy.h"
#include "cache/shard_layout.h"
#include "common/error.h"
#include "io/reader.h"

namespace sluice::cache {

struct ShardCacheOptions {
  uint64_t budget_bytes = 0;  // the expert cache's share of --budget; the arena never exceeds it
  std::string policy = "adaptive";  // docs/results.md, "Eviction policies against belady"
  PolicyOptions policy_options;
  // Checksums come with the layout (TensorSlice::digests, from core::ShardIndex). This optional
  // hook runs on every landed shard after them; throw sluice::Error to reject the shard.
  std::function<void(ShardKey, std::span<const std::byte>)> verify;
  uint32_t max_speculative_in_flight = 8;
  uint64_t max_speculative_bytes_in_flight = 0;  // 0: no byte cap
  // Lending (see above): bytes of slots lend() takes out of use, rounded up to whole slots and
  // capped at the slots beyond the working sets; 0: none.
  uint64_t lendable_bytes = 0;
};

struct CacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_read = 0;
  uint64_t evictions = 0;
  uint64_t reads_landed = 0;   // shards whose reads completed
  uint64_t read_ns = 0;        // sum over landed shards of issue -> land time
  uint64_t read_ns_max = 0;
  uint64_t io_wait_ns = 0;     // time callers spent blocked in wait / wait_any
  uint64_t prefetches = 0;
  uint64_t corrupt_extents = 0;  // landed extents whose XXH3-64 differed from the index
  uint64_t prefetch_hits = 0;
  uint64_t prefetch_hits_landed = 0;
  uint64_t prefetch_unused_evicted = 0;
  void add(const CacheCounters& o);
  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / (hits + misses) : 0.0; }
};

struct CacheStats {
  std::vector<CacheCounters> layers;
  CacheCounters total;
  uint64_t tokens = 0;
  uint64_t arena_bytes = 0;
  uint64_t resident_shards = 0;
  uint64_t resident_bytes = 0;  // exact: sum of slot_bytes of occupied slots
  uint64_t pinned_shards = 0;
  uint64_t io_busy_ns = 0;           // wall time with at least one read in flight
  uint32_t speculative_in_flight = 0;
  uint64_t speculative_bytes_in_flight = 0;
  uint64_t lent_bytes = 0;  // slots lent (lend()): out of use, their pages with the kernel
};

class ShardCache {
 public:
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& other) noexcept { *this = std::move(other); }
    Pin& operator=(Pin&& other) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin() { release(); }

    explicit operator bool() const { return cache_ != nullptr; }
    ShardKey key() const { return key_; }
    // The slot and one tensor's slice in it; the bytes are valid once wait() returned for it.
    std::span<const std::byte> bytes() const;
    std::span<const std::byte> tensor(size_t index) const;
    void release();

   private:
    friend class ShardCache;
    Pin(ShardCache* cache, uint32_t slot, ShardKey key) : cache_(cache), slot_(slot), key_(key) {}
    ShardCache* cache_ = nullptr;
    uint32_t slot_ = 0;
    ShardKey key_;
  };

  // Plans and maps the arena (Error(budget) when the budget is below the working set),
  // validates the layout against reader.file_size(), and offers the arena to the reader
  // (register_buffer) for fixed-buffer reads. Slots leave room for the reader's alignment so
  // O_DIRECT reads land zero-copy.
  ShardCache(ShardLayout layout, io::Reader& reader, ShardCacheOptions options);
  // Waits for reads still landing in the arena and unregisters it from the reader; outstanding
  // Pins must be gone. Waits for the reads still in flight (drain).
  ~ShardCache();
  // Waits until no read is in flight, every landed one verified: before an owner destroys what
  // the verify callback reads (the engine's layer plan), speculative reads must have landed.
  // A verification or read error of such a read is thrown here.
  void drain();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  void begin_token();
  Pin acquire(ShardKey key);
  std::vector<Pin> acquire_all(std::span<const ShardKey> keys);
  // The same into caller-owned pins (out.size() == keys.size(); earlier pins there are
  // released first): no allocation on the hot path.
  void acquire_all(std::span<const ShardKey> keys, std::span<Pin> out);
  bool prefetch(ShardKey key);
  // Read-ahead of a large batch's next layer (core/llama/expert_predictor.h): a speculative load like
  // prefetch, but outside the speculative caps, and it never evicts a shard that a prefetch or
  // read-ahead brought in and no demand has used yet, so a run of read-aheads never displaces
  // its own earlier guesses. The caps exist so that speculation cannot delay a demand read; the
  // caller starts a read-ahead only once the current layer's demand reads are all issued, and
  // the next demand reads are for these same shards. False when the shard is present or no
  // slot of its class is free or evictable that way.
  bool read_ahead(ShardKey key);
  // Warm start (cache/warm_start.h): loads `key` into a free slot of its size class (it never
  // evicts) through the normal read path, so digests are verified on landing. Counts no hit or
  // miss; the policy sees on_insert only, as for a prefetch. Returns a pin to wait() on, or an
  // empty Pin when the shard is already resident or its size class has no free slot.
  Pin preload(ShardKey key);

  void wait(const Pin& pin);
  // Index of a landed pin among the non-empty ones (earliest landed first). Throws
  // Error(invalid_argument) when every pin is empty.
  size_t wait_any(std::span<const Pin> pins);
  // Whether the pin's read failed (wait_any threw for it): lets a caller re-read that one shard.
  bool failed(const Pin& pin) const;

  // Lending (see the header comment): lend() takes the designated slots out of use (again:
  // nothing changes) and returns their bytes; Error(internal) when one of them is pinned.
  uint64_t lend();
  void reclaim();
  // The designated slots' bytes: what lend() gives (0: nothing to lend).
  uint64_t lendable_bytes() const { return lendable_bytes_; }
  // Slots of a size class that are not lent: the most shards of its layers that can be pinned.
  uint64_t usable_slots(uint32_t size_class) const;

  bool is_resident(ShardKey key) const;  // landed or being read
  // Demand (non-speculative) reads issued and not yet reaped; the prefetcher waits for zero.
  uint32_t demand_reads_in_flight() const;
  CacheStats stats() const;
  const CachePlan& plan() const { return plan_; }
  const ShardLayout& layout() const { return layout_; }
  // The whole arena, for a GPU tier to page-lock it (cudaHostRegister) so copies out of it run
  // asynchronously; its contents belong to the cache.
  std::span<std::byte> arena_span() const { return {arena_->data(), static_cast<size_t>(arena_->size())}; }
  std::string_view policy_name() const { return policy_->name(); }

 private:
  enum class State : uint8_t { free, reading, ready, failed, lent };
  struct Slot {
    State state = State::free;
    bool speculative = false;  // a prefetch read still in flight
    bool prefetched_unused = false;  // brought by prefetch, no demand access yet
    uint64_t read_bytes = 0;
    bool in_table = false;     // slot_of_ points here (a failed slot is detached on retry)
    ShardKey key;
    uint32_t size_class = 0;
    uint32_t pins = 0;
    uint32_t pending = 0;      // extents not yet completed
    uint64_t landed_seq = 0;
    std::chrono::steady_clock::time_point issued;
    ErrorCode error_code = ErrorCode::io_error;
    std::string error;
    std::byte* data = nullptr;
  };

  void check_key(ShardKey key) const;
  // Returns a slot for `key` (free, or evicted by policy) or -1 when speculative and none.
  // keep_prefetched: never evict a slot whose prefetch has not been used (read_ahead).
  int64_t reserve_locked(std::unique_lock<std::mutex>& lock, ShardKey key, bool speculative,
                         bool keep_prefetched = false);
  bool speculate(ShardKey key, bool capped);
  void issue_locked(uint32_t slot);
  void drive_io_locked(std::unique_lock<std::mutex>& lock);
  void finish_landed_locked(uint32_t slot, uint64_t seq);
  void free_slot_locked(uint32_t slot);
  void release(uint32_t slot);
  void wait_no_reads_locked(std::unique_lock<std::mutex>& lock);  // every pending extent reaped
  [[noreturn]] void throw_failed(const Slot& s) const;

  ShardLayout layout_;
  io::Reader& reader_;
  ShardCacheOptions options_;
  CachePlan plan_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<EvictionPolicy> policy_;
  uint32_t alignment_ = 1;
  bool verifying_ = false;  // the reader's, as used for placement (shard_layout.h)
  // Extents of `key` into `out` (cleared first); slot offsets depend on the expert's file offset.
  void extents_of(ShardKey key, std::vector<ShardExtent>& out) const;
  std::vector<ShardExtent> extent_scratch_;

  mutable std::mutex mutex_;
  std::condition_variable landed_;
  bool reaping_ = false;
  std::vector<Slot> slots_;
  std::vector<std::vector<uint32_t>> class_slots_;
  std::vector<std::vector<uint32_t>> free_slots_;
  std::vector<int64_t> slot_of_;  // per shard_index; -1 when absent
  uint64_t landed_counter_ = 0;
  uint32_t speculative_in_flight_ = 0;
  uint64_t speculative_bytes_in_flight_ = 0;
  uint32_t reads_in_flight_ = 0;  // slots in the reading state
  std::chrono::steady_clock::time_point busy_since_;
  uint64_t io_busy_ns_ = 0;
  void read_started_locked(Slot& x);
  void read_ended_locked(Slot& x);
  uint64_t tokens_ = 0;
  std::vector<CacheCounters> counters_;
  std::vector<ShardKey> candidates_;
  std::vector<uint32_t> candidate_slots_;
  std::vector<io::ReadRequest> requests_;
  std::vector<uint32_t> landed_scratch_;
  // Lending: the designated slots (at the arena's tail), how many per size class, their bytes,
  // and whether they are lent now.
  std::vector<uint32_t> lendable_slots_;
  std::vector<uint64_t> lendable_of_class_;
  uint64_t lendable_bytes_ = 0;
  bool lent_ = false;
  // Places the slots in the arena (the designated ones last) and registers its head.
  void lay_out_slots();
};

}  // namespace sluice::cache
