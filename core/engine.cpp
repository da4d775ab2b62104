#include "core/engine.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "cache/arena.h"
#include "cache/trace.h"
#include "common/error.h"
#include "common/huge_pages.h"
#include "common/units.h"
#include "core/arch/budget_plan.h"
#include "core/experts/expert_partition.h"
#include "core/architectures.h"
#include "core/gguf/model_summary.h"
#include "io/file_mapping.h"

namespace sluice::core {

namespace {

cache::ExpertProfile load_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "--warm: cannot read profile '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return cache::parse_profile(text.str(), path);
}

void check_options(const EngineOptions& options) {
  if (options.budget_bytes > 0 && options.cache_experts > 0) {
    throw Error(ErrorCode::invalid_argument, "--budget and --cache-experts are alternatives; give one");
  }
  if (options.cache_experts < 0 || options.cache_experts > 1) {
    throw Error(ErrorCode::invalid_argument, "--cache-experts must be in (0%, 100%]");
  }
  if (options.widen_f16_to_f32 && !options.in_core && (options.budget_bytes > 0 || options.cache_experts > 0)) {
    throw Error(ErrorCode::invalid_argument, "--widen-f16 keeps every expert in RAM; it cannot be combined with a budget");
  }
}

// The layer cache's sizes: one unit per size class, and two (capped at all of them).
struct LayerArena {
  uint64_t min = 0, two = 0;
};

LayerArena layer_arena_of(const cache::ShardLayout& layout, uint32_t alignment) {
  if (layout.n_layer() == 0) return {};
  const uint64_t all = cache::plan_cache(layout, UINT64_MAX / 4, alignment).arena_bytes;
  const uint64_t min = cache::plan_cache(layout, all, alignment).min_bytes;
  return {min, std::min(all, 2 * min)};
}

}  // namespace

void Engine::open(const EngineOptions& options) {
  io::IoOptions io_options = options.io;
  if (options.faults && options.faults->fail_uring_setup) io_options.simulate_uring_failure = true;
  io::OpenedReader opened = io::open_reader(options.model_path, io_options);
  reader_ = std::move(opened.reader);
  notices_ = std::move(opened.notices);
  plain_reader_ = reader_.get();
  if (options.faults && options.faults->injects_reads()) {
    auto faulty = std::make_unique<io::FaultInjectingReader>(std::move(reader_), *options.faults);
    faulty_ = faulty.get();
    reader_ = std::move(faulty);
    notices_.push_back("--io-faults: injecting faults into expert shard reads (seed " +
                       std::to_string(options.faults->seed) + ")");
  }
  pool_ = std::make_unique<kernels::ThreadPool>(std::max(1u, options.threads));
}

namespace {

// Everything decided before a byte of weights is read.
// Lambdas in `load` and `in` point into the plan itself, so it never moves.
struct RunPlan {
  bool stream = false;
  ArchLoadOptions load, lean_load;
  SessionOptions session;
  std::optional<ShardIndex> index;
  std::unique_ptr<ArchModel> planned, lean;  // lean: planned with stream_layer_tensors
  std::optional<StreamedLayout> expert_layout;
  uint64_t all_experts_arena = 0;
  BudgetInputs in;
  BudgetPlan budget;
  RunPlan() = default;
  RunPlan(const RunPlan&) = delete;
  RunPlan& operator=(const RunPlan&) = delete;
};

// Plans the full load (experts in core or not), reads the shard index and wires the resident
// tensors' check to it.
void plan_load(RunPlan& p, const EngineOptions& options, const Architecture& arch, io::Reader& plain, VerifyMode mode,
               std::vector<std::string>& notices) {
  p.load.widen_f16_to_f32 = options.widen_f16_to_f32;
  // Widening F16 to F32 is a conversion of loaded tensors; streamed shards are the file's bytes,
  // so a widened run keeps its experts in core.
  p.stream = !options.in_core && !options.widen_f16_to_f32;
  if (options.widen_f16_to_f32 && !options.in_core)
    notices.push_back("--widen-f16: experts are widened and held in RAM (no streaming)");
  p.load.load_routed_experts = !p.stream;
  // A streaming run reads token embedding rows as tokens need them (core/layers/embedding_rows.h).
  p.load.embeddings_from_file = p.stream;
  p.planned = arch.plan(plain, p.load);
  if (p.stream && p.planned->expert_geometry().n_expert == 0) {
    // A dense model has nothing to stream; run it in core.
    p.stream = false;
    p.load.load_routed_experts = true;
    p.load.embeddings_from_file = false;
    p.planned = arch.plan(plain, p.load);
  }
  p.session = options.session;
  if (!p.stream) p.session.prefetch_depth = 0;  // nothing to read ahead
  p.index = index_for_run(mode, options.model_path, p.planned->gguf(), plain, notices);
  if (p.index && p.load.embeddings_from_file) {
    // The index digests whole tensors: the table is read and checked at load.
    p.load.embeddings_from_file = false;
    p.planned = arch.plan(plain, p.load);
  }
  if (p.index) {
    // Resident tensors (and in-core experts) are checked as they land, like streamed shards.
    const ShardIndex* index = &*p.index;
    p.load.check_tensor = [index](const GgufTensorInfo& t, std::span<const std::byte> bytes) {
      const IndexedTensor* it = index->find(t.name);
      if (!it || it->file_offset != t.file_offset || it->bytes != bytes.size() || it->n_parts == 0) return true;
      const uint64_t part = it->part_bytes();
      for (uint32_t i = 0; i < it->n_parts; ++i) {
        if (!index->verify(t.name, i, bytes.subspan(i * part, part))) return false;
      }
      return true;
    };
  }
  p.lean_load = p.load;
  p.lean_load.stream_layer_tensors = true;
}

// The largest context below the session's at which the budget planner finds a way (0: none),
// for the message of a budget that the KV cache (and the scratch, which grows with the context)
// outgrows. The KV cache and scratch only grow with the context, so a binary search finds it.
int64_t largest_context_that_fits(RunPlan& p) {
  const SessionOptions requested = p.session;
  const int64_t upper = requested.n_ctx > 0 ? requested.n_ctx : 4096;  // 0 is min(training, 4096)
  auto fits_at = [&p](int64_t n_ctx) {
    p.session.n_ctx = n_ctx;  // p.in.scratch reads p.session
    BudgetInputs in = p.in;
    in.kv = p.planned->kv_bytes(p.session);
    in.recurrent = p.planned->recurrent_bytes(p.session);
    try {
      plan_budget(in);
      return true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::budget) throw;
      return false;
    }
  };
  int64_t lo = 0, hi = upper - 1;  // lo: 0 or a context that fits
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits_at(mid)) lo = mid; else hi = mid - 1;
  }
  p.session = requested;
  return lo;
}

// The sizes the budget planner decides on: the full load's, the expert cache's and (where the
// architecture streams layers) the lean load's.
void plan_sizes(RunPlan& p, const EngineOptions& options, const Architecture& arch, const ArchitectureGpu* gpu,
                io::Reader& plain, uint32_t alignment) {
  BudgetInputs& in = p.in;
  in.budget = p.stream ? options.budget_bytes : 0;
  in.requested_batch = p.session.n_batch;
  in.model_path = options.model_path;
  in.resident = p.planned->weight_bytes();
  in.kv = p.planned->kv_bytes(p.session);
  in.recurrent = p.planned->recurrent_bytes(p.session);
  if (p.stream) {
    const cache::ShardLayout& layout =
        p.expert_layout.emplace(build_shard_layout(p.planned->gguf(), p.planned->expert_geometry(),
                                                   p.index ? &*p.index : nullptr)).layout;
    p.all_experts_arena = cache::plan_cache(layout, UINT64_MAX / 4, alignment).arena_bytes;
    in.expert_min = cache::plan_cache(layout, p.all_experts_arena, alignment).min_bytes;
    if (arch.can_stream_layers()) p.lean = arch.plan(plain, p.lean_load);
    const LayerArena la = p.lean ? layer_arena_of(p.lean->layer_layout(), alignment) : LayerArena{};
    in.can_stream_layers = la.min > 0;
    in.lean_resident = p.lean ? p.lean->weight_bytes() : 0;
    in.layer_min = la.min;
    in.layer_two = la.two;
  }
  // The predictor reads later blocks' router weights, which are not in RAM when layers stream:
  // prefetch is off then, and its scratch is not counted.
  const unsigned threads = options.threads;
  in.scratch = [&p, threads](int64_t batch, bool layers) {
    SessionOptions o = p.session;
    o.n_batch = batch;
    if (layers) o.prefetch_depth = 0;
    return (layers ? *p.lean : *p.planned).scratch_bytes(o, threads);
  };
  if (options.gpu) in.gpu_staging = [&p, gpu](int64_t batch) { return gpu->host_staging(*p.planned, batch); };
  try {
    p.budget = plan_budget(in);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::budget || in.kv == 0) throw;
    const int64_t largest = largest_context_that_fits(p);
    if (largest == 0) throw;
    throw Error(ErrorCode::budget, std::string(e.what()) + "; the largest context that fits is -c " +
                                       std::to_string(largest));
  }
  const BudgetNeed& chosen = p.budget.chosen;
  if (!p.stream && options.budget_bytes > 0 && chosen.total() > options.budget_bytes) {
    throw Error(ErrorCode::budget, "budget " + human_bytes(options.budget_bytes) + " is below the " +
                                       human_bytes(chosen.total()) + " an in-core run of '" + options.model_path +
                                       "' needs (all weights + KV cache + scratch" +
                                       (chosen.gpu_staging ? " + --gpu page-locked staging" : "") + ")");
  }
}

// What the plan changes in the session (batch, prefetch), with a notice for each change.
void apply_plan(RunPlan& p, const EngineOptions& options, const Architecture& arch, std::vector<std::string>& notices) {
  const BudgetPlan& plan = p.budget;
  if (!p.stream && !options.warm_profile.empty())
    notices.push_back("--warm: every expert is in RAM already (nothing streams); the profile is not used");
  if (plan.n_batch < p.session.n_batch) {
    notices.push_back("budget: prompt batch lowered from " + std::to_string(p.session.n_batch) + " to " +
                      std::to_string(plan.n_batch) + " tokens so the scratch fits (" +
                      human_bytes(p.in.scratch(plan.n_batch, plan.stream_layers)) + " instead of " +
                      human_bytes(p.in.scratch(p.session.n_batch, plan.stream_layers)) + ")");
  }
  p.session.n_batch = plan.n_batch;
  if (plan.stream_layers && options.gpu) {
    const BudgetInputs& in = p.in;
    const uint64_t resident_run =
        in.resident + in.kv + in.recurrent + in.scratch(plan.n_batch, false) + in.expert_min + plan.chosen.gpu_staging;
    throw Error(ErrorCode::unsupported, "--gpu with a budget that streams layers is not supported yet; raise --budget to " +
                                            human_bytes(resident_run) + " or more");
  }
  if (p.session.prefetch_depth > 0 && plan.stream_layers) {
    notices.push_back("prefetch: off while layers stream (the predictor needs the next layers' router weights in RAM)");
    p.session.prefetch_depth = 0;
  }
  if (p.session.prefetch_depth > 0 && !p.planned->predicts_experts()) {
    notices.push_back("prefetch: " + std::string(arch.name()) +
                      " experts are not predicted yet (no speculative reads); they still run in completion order");
    p.session.prefetch_depth = 0;
  }
}

}  // namespace

Engine::Engine(const EngineOptions& options) : options_(options) {
  check_options(options);
  // A bad profile fails before the model is loaded; its shape is checked once the layout is known.
  if (!options.warm_profile.empty()) warm_profile_ = load_profile(options.warm_profile);
  std::optional<cache::ExpertProfile> partition_profile;
  if (!options.expert_partition.empty()) {
    if (!options.session.exchange)
      throw Error(ErrorCode::invalid_argument, "--expert-partition needs --expert-parallel (it splits experts across ranks)");
    partition_profile = read_partition_profile(options.expert_partition);
  }
  open(options);
  // The header, resident tensors and the index load through the plain reader; only streamed
  // expert shards (what the checksums and the re-read guard) see injected faults.
  io::Reader& plain = *plain_reader_;
  arch_ = &architecture_for(GgufFile::parse(plain));
  const ArchitectureGpu* gpu = architecture_gpu(*arch_);
  if (options.gpu && !gpu)
    throw Error(ErrorCode::unsupported, "--gpu is not supported for " + std::string(arch_->name()) +
                                            " models yet; run them without --gpu");
  RunPlan p;
  plan_load(p, options, *arch_, plain, verify_mode(), notices_);
  plan_sizes(p, options, *arch_, gpu, plain, cache::usable_alignment(reader_->alignment()));
  apply_plan(p, options, *arch_, notices_);
  verifying_ = p.index.has_value();
  split_.routed_expert_bytes = summarize(p.planned->gguf()).routed_expert_bytes;
  split_.expert_min = p.in.expert_min;
  if (options.gpu) require_gpu();

  // Load and build.
  const bool stream_layers = p.budget.stream_layers;
  if (stream_layers) layer_reader_ = io::open_reader(options.model_path, options.io).reader;
  p.lean.reset();
  if (options.map_file && !p.stream) {
    p.load.mapping = std::make_shared<const io::FileMapping>(plain.parts());
    weights_mapped_ = true;
  }
  model_ = stream_layers ? arch_->load(plain, p.lean_load, nullptr) : arch_->load(plain, p.load, std::move(p.planned));
  if (p.stream) {
    auto source = std::make_unique<CachedExpertSource>(model_->gguf(), model_->expert_geometry(), std::move(*p.expert_layout));
    streamed_ = source.get();
    experts_ = std::move(source);
  } else {
    experts_ = model_->in_core_experts();
  }
  if (stream_layers) layers_ = &model_->stream_layers(p.index ? &*p.index : nullptr);
  // With --gpu the session sees the experts through a TrackedExpertSource, so the VRAM tier
  // knows which expert a pinned view belongs to.
  ExpertSource* source = experts_.get();
  // Expert parallelism: this rank's speculation reads only its own experts.
  if (ExpertExchange* x = options.session.exchange) {
    if (partition_profile)
      x->set_partition(balanced_partition(*partition_profile, model_->expert_geometry(), x->partition().n_ranks,
                                          x->partition().rank, options.expert_partition));
    partitioned_ = std::make_unique<PartitionedExpertSource>(*source, x->partition(), model_->expert_geometry().n_expert);
    source = partitioned_.get();
  }
  if (options.gpu) {
    tracked_ = std::make_unique<TrackedExpertSource>(*source, static_cast<int>(model_->expert_geometry().n_expert));
    source = tracked_.get();
  }
  session_ = model_->create_session(*source, *pool_, p.session);
  if (options.session.exchange && !session_->expert_parallel())
    throw Error(ErrorCode::unsupported, "--expert-parallel is not supported for " + std::string(arch_->name()) +
                                            " models yet; run them without it");

  split_.resident_weights = model_->weight_bytes();
  if (model_->embeddings_in_file()) split_.embeddings_in_file = model_->gguf().tensor("token_embd.weight").n_bytes;
  split_.kv_cache = session_->kv_bytes();
  split_.recurrent_state = session_->recurrent_state_bytes();
  split_.scratch = session_->scratch_bytes();
  split_.gpu_staging = p.budget.chosen.gpu_staging;
  split_.budget = options.budget_bytes;
  split_.n_batch = session_->n_batch();
  split_.min_budget = p.stream ? p.budget.minimum.total() : split_.total();
  // Lending (engine.h): the batch scratch's pages go back to the kernel until a prompt needs them.
  if (p.stream && options.budget_bytes > 0 && !options.gpu && session_->n_seq() == 1 && session_->n_batch() > 1) {
    SessionOptions one = p.session;
    one.n_batch = 1;
    const ReleasedPages released = session_->release_batch_scratch();
    const uint64_t keep = model_->scratch_bytes(one, static_cast<unsigned>(pool_->size())) +
                          released.buffers * unadvised_fault_bytes();
    lend_bytes_ = released.bytes > keep ? released.bytes - keep : 0;
  }
  if (stream_layers) attach_layer_cache(p.budget.layer_arena);
  if (p.stream)
    attach_expert_cache(p.all_experts_arena, budget_error(p.budget.minimum, options.budget_bytes, options.model_path,
                                                          p.budget.minimum_streams));
  attach_gpu();
}

VerifyMode Engine::verify_mode() const {
  if (!options_.verify) return VerifyMode::off;
  return options_.require_index ? VerifyMode::require : VerifyMode::on;
}

void Engine::attach_gpu() {
  if (!options_.gpu) return;
  gpu_ = architecture_gpu(*arch_)->make_tier(*model_, *tracked_, *pool_, session_->n_batch(),
                                             cache_ ? cache_->arena_span() : std::span<std::byte>{}, options_.gpu_options);
  session_->set_matmul_offload(gpu_.get());
}

void Engine::attach_layer_cache(uint64_t layer_arena) {
  cache::ShardCacheOptions lopts;
  lopts.budget_bytes = layer_arena;
  lopts.policy = "lru";
  if (verifying_) {
    const uint32_t layer_alignment = cache::usable_alignment(layer_reader_->alignment());
    lopts.verify = [layers = layers_, layer_alignment](cache::ShardKey key, std::span<const std::byte> slot) {
      layers->verify(key, slot, layer_alignment);
    };
  }
  layer_cache_ = std::make_unique<cache::ShardCache>(layers_->layout(), *layer_reader_, lopts);
  layers_->attach(*layer_cache_);
  split_.layer_arena = layer_cache_->plan().arena_bytes;
}

cache::WarmResult Engine::warm_up(const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!cache_ || warm_keys_.empty()) return {};
  return cache::warm_start(*cache_, warm_keys_, progress);
}

std::optional<io::FaultCounts> Engine::fault_counts() const {
  if (!faulty_) return std::nullopt;
  return faulty_->counts();
}

uint64_t Engine::shard_rereads() const { return streamed_ ? streamed_->rereads() : 0; }

std::string Engine::describe_faults() const {
  if (!faulty_) return {};
  const io::FaultCounts c = faulty_->counts();
  const uint64_t detected = cache_ ? cache_->stats().total.corrupt_extents : 0;
  auto n = [](uint64_t v) { return std::to_string(v); };
  return "io faults injected: short reads " + n(c.short_reads) + ", EAGAIN " + n(c.eagains) + ", delayed " +
         n(c.delays) + ", transient EIO " + n(c.transient_eios) + ", persistent EIO " + n(c.persistent_eios) +
         ", bit flips " + n(c.bit_flips) + "; corrupt extents detected " + n(detected) + ", shards re-read " +
         n(shard_rereads());
}

void Engine::attach_expert_cache(uint64_t all_experts_arena, const Error& too_small) {
  const EngineOptions& options = options_;
  const uint64_t fixed = split_.total() - split_.expert_arena;
  uint64_t arena_budget = all_experts_arena;
  if (options.budget_bytes > 0) {
    if (options.budget_bytes < fixed + split_.expert_min) throw too_small;
    arena_budget = std::min(all_experts_arena, options.budget_bytes - fixed);
    const uint64_t while_batch = arena_budget;
    arena_budget = std::min(all_experts_arena, arena_budget + lend_bytes_);
    lend_bytes_ = arena_budget - while_batch;
  } else if (options.cache_experts > 0) {
    // With expert parallelism the share is of this rank's experts: N ranks at 25% hold 25% of
    // the model between them, the RAM one process at 25% uses.
    double share = 1.0;
    if (const ExpertExchange* x = options.session.exchange) share = owned_share(x->partition(), model_->expert_geometry());
    arena_budget = std::max<uint64_t>(
        split_.expert_min,
        static_cast<uint64_t>(std::ceil(options.cache_experts * share * static_cast<double>(all_experts_arena))));
    arena_budget = std::min(arena_budget, all_experts_arena);
  }
  cache::ShardCacheOptions copts;
  copts.budget_bytes = arena_budget;
  copts.policy = options.policy;
  copts.policy_options = options.policy_options;
  if (!options.warm_profile.empty()) {
    const cache::ShardLayout& layout = streamed_->layout().layout;
    cache::check_profile_matches(warm_profile_, layout.n_layer(), layout.n_expert, options.warm_profile);
    warm_keys_ = cache::rank_by_use(warm_profile_);
    if (copts.policy_options.profile == nullptr) copts.policy_options.profile = &warm_profile_;
  }
  {
    // Speculative reads in flight: depth x n_expert_used, of at most the largest shard each,
    // unless told otherwise.
    const cache::ShardLayout& layout = streamed_->layout().layout;
    const uint32_t depth = static_cast<uint32_t>(std::max(1, options.session.prefetch_depth));
    copts.max_speculative_in_flight =
        options.prefetch_max_requests ? options.prefetch_max_requests : depth * layout.n_expert_used;
    uint64_t largest = 0;
    for (uint32_t l = 0; l < layout.n_layer(); ++l) largest = std::max(largest, cache::slot_bytes(layout, l));
    copts.max_speculative_bytes_in_flight =
        options.prefetch_max_bytes ? options.prefetch_max_bytes : copts.max_speculative_in_flight * largest;
  }
  // Whole slots: at least lend_bytes_, or every slot beyond the working sets when those hold less
  // (the arena then keeps its working sets, which the budget without lending already held).
  copts.lendable_bytes = lend_bytes_;
  cache_ = std::make_unique<cache::ShardCache>(streamed_->layout().layout, *reader_, copts);
  streamed_->attach(*cache_);
  split_.expert_arena = cache_->plan().arena_bytes;
  lend_bytes_ = cache_->lendable_bytes();
  split_.lent = lend_bytes_;
  if (options.budget_bytes == 0 && options.cache_experts > 0) split_.budget = split_.total();
}

void Engine::fit_batch(size_t n_tokens) {
  if (lend_bytes_ == 0) return;
  if (n_tokens > 1 && !lending_) {
    cache_->lend();
    lending_ = true;
  } else if (n_tokens <= 1 && lending_) {
    session_->release_batch_scratch();
    cache_->reclaim();
    lending_ = false;
  }
}

std::span<const float> Engine::forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits) {
  fit_batch(tokens.size());
  if (cache_) cache_->begin_token();
  if (layer_cache_) layer_cache_->begin_token();
  return session_->forward(tokens, start_pos, all_logits);
}

std::span<const float> Engine::forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                             std::span<const int64_t> positions, std::span<const uint8_t> want_logits) {
  fit_batch(tokens.size());
  if (cache_) cache_->begin_token();
  if (layer_cache_) layer_cache_->begin_token();
  return session_->forward_batch(tokens, seqs, positions, want_logits);
}

Engine::~Engine() {
  // The session may hold pins through the expert source; drop them before the cache goes.
  session_.reset();
  gpu_.reset();  // finishes copies out of the RAM arena and unregisters it
  tracked_.reset();
  experts_.reset();
  // Layer reads still in flight are verified against the layer stream's plan when they land: let
  // them land while it exists (a read-ahead of the next layer at exit was verified after the model
  // had gone: a use after free). Their errors no longer matter here.
  if (layer_cache_) {
    try {
      layer_cache_->drain();
    } catch (...) {
    }
  }
  model_.reset();  // with its layer stream, whose pins are in layer_cache_
  cache_.reset();
  layer_cache_.reset();
}

std::string Engine::describe_budget() const {
  std::string s = split_.budget ? "budget " + human_bytes(split_.budget) : std::string("budget unlimited");
  s += ": resident weights " + human_bytes(split_.resident_weights);
  if (split_.embeddings_in_file)
    s += " (token embeddings, " + human_bytes(split_.embeddings_in_file) + ", read per token from the file)";
  if (layer_cache_) s += " + streamed layers " + human_bytes(split_.layer_arena);
  s += " + KV cache " + human_bytes(split_.kv_cache);
  if (split_.recurrent_state) s += " + recurrent state " + human_bytes(split_.recurrent_state);
  s += std::string("") +
       " + scratch " + human_bytes(split_.scratch) +
       " (batch " + std::to_string(split_.n_batch) + ")";
  if (split_.gpu_staging) s += " + --gpu page-locked staging " + human_bytes(split_.gpu_staging);
  if (cache_) {
    double frac = split_.routed_expert_bytes
                      ? static_cast<double>(split_.expert_arena) / static_cast<double>(split_.routed_expert_bytes)
                      : 0;
    char buf[64];
    std::snprintf(buf, sizeof buf, " (%.0f%% of routed experts)", std::min(1.0, frac) * 100);
    s += " + expert cache " + human_bytes(split_.expert_arena) + buf;
    if (split_.lent) s += " - " + human_bytes(split_.lent) + " of it lent to the scratch while a prompt batch runs";
  } else {
    s += " (experts in core)";
  }
  s += " = " + human_bytes(split_.total());
  if (cache_ && !options_.session.route.exact())
    s += "; routing " + describe(options_.session.route, streamed_->layout().layout.n_expert_used);
  return s;
}

}  // namespace sluice::core
