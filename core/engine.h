// Engine: a model ready to run inside a memory budget.
//
// It opens the file (io_uring with O_DIRECT where possible, pread otherwise), loads everything
// that is not a routed expert into RAM, builds the session (KV cache, activations, scratch), and
// streams routed experts through a ShardCache whose arena gets whatever the budget leaves:
//
//   budget = resident weights + layer arena + KV cache + session scratch + expert arena
//
// Everything is sized from the tensor directory (Architecture::plan) before anything is read or
// allocated. With a budget, the engine takes the first of these that fits:
//   1. all non-routed weights resident, the requested batch (-b);
//   2. layer streaming: only the token embeddings, output_norm and tensors converted at load stay
//      resident; every block's other tensors and the output head stream through a second
//      ShardCache (core/layers/streamed_layers.h) whose arena holds two units per size class when it
//      can (so the next block is read while one computes), else one; the requested batch;
//   3. the same with a smaller batch (prefill in chunks of fewer tokens, like llama.cpp's
//      n_ubatch): scratch scales with the batch; a notice says so. Results then equal an in-core
//      run with that batch (batched and single-token products differ in the last bits).
// The minimum is the smaller of (1) and (2) at batch 1: resident part + one slot per size class
// of layer units (if streamed) + KV + scratch at batch 1 + one MoE layer's working set of
// experts (n_expert_used slots per expert size class). Below it: Error(budget) naming it in MiB.
// A layer arena between one/two units per class and all of them is not planned: blocks are
// visited cyclically, so LRU would miss on every one of them anyway.
//
// Budget modes:
//   budget_bytes > 0          a hard ceiling; below the minimum -> Error(budget) stating it
//   cache_experts in (0, 1]   the ceiling is sized so the expert arena holds that fraction of
//                             all routed expert bytes (at least one layer's working set)
//   neither                   unlimited: the arena can hold every expert (nothing is evicted)
//   in_core                   the reference path: experts loaded into RAM with the rest, no cache
// Every mode gives bit-identical logits: the same bytes reach the same kernels.
//
// Lending: under a hard budget (budget_bytes) with one sequence, the scratch a prompt batch fills
// (activations of -b tokens: about 530 MiB at -b 512 on a Kimi-K2-shaped model) and the expert
// arena take turns with the same bytes. A decode step of one token touches only the scratch of a
// batch of one, so the arena is planned with the rest:
//   lend = pages Session::release_batch_scratch returns - scratch at batch 1
//          - per released buffer, what one touch may fault in beyond it (unadvised_fault_bytes:
//            2 MiB where THP is "always", else 4 KiB).
// Before a forward of more than one token the cache lends that many bytes of slots, designated
// when it is built (it evicts what they held and returns their pages to the kernel,
// cache/shard_cache.h); before the next
// one-token forward the session releases its batch scratch and the cache takes the slots back.
// So resident + KV + scratch in use + arena in use stays within the budget at every moment, and
// decode gets a larger cache. Never with --gpu (the arena is page-locked), with several sequences
// (serve's slots), or without a hard budget. Results do not change: only which shards stay cached.
//
// Architectures: the engine knows none by name. It asks the registry (core/architectures.h) for
// the file's Architecture, which plans and loads an ArchModel and makes its Session
// (core/arch/architecture.h); the budget is planned by one pure function over the sizes the model
// states (core/arch/budget_plan.h). Routed experts of every architecture are shards of the same
// cache: streamed, cached, prefetched (where the architecture predicts) and checksummed alike.
// A recurrent state (kimi-k3's KDA) counts against the budget next to the KV cache; an
// architecture whose layers do not stream keeps them resident.
//
// With `gpu`, the session's weight products are offered to a GpuTier (VRAM, its own budget
// `gpu_options.vram_bytes`, not counted in budget_bytes; the tier's page-locked host staging is
// RAM and is counted, as BudgetSplit::gpu_staging); the routed experts reach the session
// through a TrackedExpertSource so the tier knows which expert a pinned view is. GPU runs give
// the CPU run's greedy tokens, not its bit-identical logits.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/shard_cache.h"
#include "cache/warm_start.h"
#include "core/arch/architecture.h"
#include "core/arch/session.h"
#include "core/experts/expert_exchange.h"
#include "core/experts/expert_source.h"
#include "core/experts/partitioned_expert_source.h"
#include "core/experts/streamed_experts.h"
#include "core/experts/tracked_expert_source.h"
#include "core/gpu/gpu_tier.h"
#include "io/fault_reader.h"
#include "io/open_reader.h"
#include "kernels/thread_pool.h"

namespace sluice::core {

struct EngineOptions {
  std::string model_path;
  uint64_t budget_bytes = 0;
  double cache_experts = 0;  // fraction of routed expert bytes; 0 = not used
  bool in_core = false;
  // With in_core: tensors used as stored stay in a read-only mapping of the file (the page cache's
  // pages) instead of being read into the weight arena (io/file_mapping.h; --mmap).
  bool map_file = false;
  bool widen_f16_to_f32 = false;
  unsigned threads = 1;
  SessionOptions session;
  io::IoOptions io;
  std::string policy = "adaptive";
  // --verify (core/gguf/shard_index.h, VerifyMode): verify every landed shard against the model's
  // shard index (sluice index). A stale index is an error; a missing one adds a notice.
  bool verify = true;
  // --verify require: refuse to run without a current index (only with verify).
  bool require_index = false;
  cache::PolicyOptions policy_options;
  // --gpu: a VRAM tier above the RAM cache (core/gpu/gpu_tier.h); VRAM is not part of budget_bytes.
  bool gpu = false;
  GpuTierOptions gpu_options;
  // Warm start (cache/warm_start.h): a profile file (`--profile-out`, `sluice tune
  // --profile-out`). Loaded and checked against the model here; it also becomes the policy's
  // profile when policy_options has none (hot-pin then pins its hottest shards). The preload
  // itself runs in warm_up(), so the caller can show progress.
  std::string warm_profile;
  // --expert-partition (core/experts/expert_partition.h): with session.exchange, a profile whose
  // use counts balance the routed experts across the ranks; empty: the static e mod N partition.
  std::string expert_partition;
  // Debugging and tests (--io-faults): shard reads go through an io::FaultInjectingReader. The
  // model's resident tensors and header load through the plain reader; only streamed expert
  // shards, the data the checksums and the re-read guard, see the faults.
  std::optional<io::FaultOptions> faults;
  // Prefetch: session.prefetch_depth MoE layers ahead (0: off; forced off in core, while layers
  // stream and for architectures without a predictor (ArchModel::predicts_experts)). Speculative
  // reads in flight are capped at prefetch_max_requests (0: depth x n_expert_used) and
  // prefetch_max_bytes (0: that many of the largest shards).
  uint32_t prefetch_max_requests = 0;
  uint64_t prefetch_max_bytes = 0;
};

// The --prefetch-depth the CLI uses unless told otherwise (the better of 1 and 2 as measured on
// a synthetic Kimi K2 at --cache-experts 10%; see README).
constexpr int kDefaultPrefetchDepth = 2;

struct BudgetSplit {
  uint64_t resident_weights = 0;  // tensors in RAM (all tensors when in-core)
  uint64_t layer_arena = 0;       // the streamed layers' cache (0: every layer resident)
  uint64_t kv_cache = 0;
  uint64_t recurrent_state = 0;   // a recurrent state (kimi-k3's KDA; 0 for other architectures)
  uint64_t scratch = 0;           // activations, router and matmul scratch
  uint64_t gpu_staging = 0;       // --gpu: page-locked host staging outside the arena (plan_gpu_host_staging)
  uint64_t expert_arena = 0;      // the shard cache's arena
  uint64_t expert_min = 0;        // the arena's minimum: one MoE layer's working set
  uint64_t routed_expert_bytes = 0;  // all routed experts in the file
  uint64_t budget = 0;            // the ceiling in force (0: unlimited)
  uint64_t min_budget = 0;        // the smallest budget this model runs in (see above)
  int64_t n_batch = 0;            // the batch in force (may be below the requested one)
  uint64_t lent = 0;              // of expert_arena, lent to the batch scratch while a prompt runs (Lending)
  uint64_t embeddings_in_file = 0;  // token_embd's bytes left in the file, outside resident_weights (embedding_rows.h)
  uint64_t total() const {
    return resident_weights + layer_arena + kv_cache + recurrent_state + scratch + gpu_staging + expert_arena - lent;
  }
  uint64_t minimum() const { return min_budget; }
};

class Engine {
 public:
  explicit Engine(const EngineOptions& options);
  ~Engine();

  // One forward pass of the session; tells the caches a new step began (policies age, stats
  // count tokens).
  std::span<const float> forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits = true);
  // Several sequences in one pass (continuous batching, Session::forward_batch): one step for the
  // caches.
  std::span<const float> forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                       std::span<const int64_t> positions, std::span<const uint8_t> want_logits);
  const GgufFile& gguf() const { return model_->gguf(); }
  std::string describe_model() const { return model_->describe(); }
  int64_t n_vocab() const { return model_->n_vocab(); }
  int64_t n_ctx() const { return session_->n_ctx(); }
  int64_t n_batch() const { return session_->n_batch(); }
  Session& session() { return *session_; }
  const ArchModel& model() const { return *model_; }
  io::Reader& reader() { return *reader_; }
  cache::ShardCache* cache() { return cache_.get(); }  // null when in-core
  cache::ShardCache* layer_cache() { return layer_cache_.get(); }  // null when every layer is resident
  // What --io-faults injected so far; nullopt without it.
  std::optional<io::FaultCounts> fault_counts() const;
  // Shards read a second time after a failed or corrupt landing (CachedExpertSource).
  uint64_t shard_rereads() const;
  GpuTier* gpu() { return gpu_.get(); }                 // null without --gpu
  // Prediction statistics (recall, precision, waste); null when in-core.
  const cache::Prefetcher* prefetcher() const { return streamed_ ? streamed_->prefetcher() : nullptr; }
  kernels::ThreadPool& pool() { return *pool_; }
  const BudgetSplit& budget() const { return split_; }
  // Preloads the warm profile's most-used experts up to the arena's capacity (nothing when no
  // profile was given or experts are in core). Call before the first token.
  cache::WarmResult warm_up(const std::function<void(uint64_t, uint64_t)>& progress = {});
  bool has_warm_profile() const { return !warm_keys_.empty(); }
  const std::vector<std::string>& notices() const { return notices_; }
  bool verifying() const { return verifying_; }
  // Whether the weights are used in place in a mapping of the file (EngineOptions::map_file, in core).
  bool weights_mapped() const { return weights_mapped_; }
  // With --io-faults: "io faults injected: ...; corrupt extents detected N, shards re-read N";
  // empty otherwise. Names are stable (tests parse them).
  std::string describe_faults() const;
  // "budget 1.0 GiB = resident 412 MiB + KV 8 MiB + scratch 3 MiB + expert cache 601 MiB"
  std::string describe_budget() const;

 private:
  // Opens the reader (with --io-faults, the fault injector over it) and the thread pool.
  void open(const EngineOptions& options);
  void attach_gpu();
  VerifyMode verify_mode() const;  // from options_.verify and require_index
  // Sizes the expert arena from what the budget leaves after split_'s fixed parts and creates
  // the cache; `too_small` is thrown when not even one MoE layer's experts fit.
  void attach_expert_cache(uint64_t all_experts_arena, const Error& too_small);
  // Lending: before a forward of n_tokens, the arena lends to or takes back from the batch scratch.
  void fit_batch(size_t n_tokens);
  void attach_layer_cache(uint64_t layer_arena);

  EngineOptions options_;
  std::vector<std::string> notices_;
  std::unique_ptr<io::Reader> reader_;
  io::Reader* plain_reader_ = nullptr;              // reader_, or the one inside faulty_
  io::FaultInjectingReader* faulty_ = nullptr;      // reader_ when --io-faults is set
  std::unique_ptr<kernels::ThreadPool> pool_;
  const Architecture* arch_ = nullptr;
  std::unique_ptr<ArchModel> model_;
  cache::ExpertProfile warm_profile_;  // outlives cache_: the policy may point at it
  std::vector<cache::ShardKey> warm_keys_;
  std::unique_ptr<ExpertSource> experts_;
  uint64_t lend_bytes_ = 0;  // Lending: what a prompt batch takes of the arena (0: never lends)
  bool lending_ = false;     // the cache has lent them (a batch of several tokens ran last)
  CachedExpertSource* streamed_ = nullptr;  // experts_ when streaming
  std::unique_ptr<PartitionedExpertSource> partitioned_;  // over experts_ with an exchange
  std::unique_ptr<TrackedExpertSource> tracked_;  // over experts_ with --gpu
  std::unique_ptr<io::Reader> layer_reader_;  // the layer cache reaps its own completions
  LayerStream* layers_ = nullptr;             // owned by model_; null when every layer is resident
  std::unique_ptr<Session> session_;
  std::unique_ptr<cache::ShardCache> cache_;
  std::unique_ptr<cache::ShardCache> layer_cache_;
  std::unique_ptr<GpuTier> gpu_;  // last: it page-locks the cache's arena and serves the session
  BudgetSplit split_;
  bool verifying_ = false;
  bool weights_mapped_ = false;
};

}  // namespace sluice::core
