#include "core/engine.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "cache/arena.h"
#include "cache/trace.h"
#include "common/error.h"
#include "common/units.h"
#include "core/model_summary.h"

namespace sluice::core {

namespace {

Error budget_error(const BudgetSplit& s, uint64_t budget, const std::string& path) {
  return Error(ErrorCode::budget,
               "budget " + human_bytes(budget) + " is below the minimum " + human_bytes(s.minimum()) + " for '" +
                   path + "' (resident weights " + human_bytes(s.resident_weights) + " + KV cache " +
                   human_bytes(s.kv_cache) + " + scratch " + human_bytes(s.scratch) +
                   " + one MoE layer's experts " + human_bytes(s.expert_min) + ")");
}

cache::ExpertProfile load_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "--warm: cannot read profile '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return cache::parse_profile(text.str(), path);
}

}  // namespace

Engine::Engine(const EngineOptions& options) : options_(options) {
  if (options.budget_bytes > 0 && options.cache_experts > 0) {
    throw Error(ErrorCode::invalid_argument, "--budget and --cache-experts are alternatives; give one");
  }
  if (options.cache_experts < 0 || options.cache_experts > 1) {
    throw Error(ErrorCode::invalid_argument, "--cache-experts must be in (0%, 100%]");
  }
  if (options.gpu) require_gpu();  // before minutes of loading
  // A bad profile fails before the model is loaded; its shape is checked once the layout is known.
  if (!options.warm_profile.empty()) warm_profile_ = load_profile(options.warm_profile);
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
  io::Reader& plain = *plain_reader_;
  pool_ = std::make_unique<kernels::ThreadPool>(std::max(1u, options.threads));

  // Reserve before reading: check the resident part against the budget from the tensor
  // directory alone, before any weight is loaded.
  std::optional<ShardIndex> index;
  {
    GgufFile file = GgufFile::parse(plain);
    if (options.verify) index = ShardIndex::load(options.model_path, file, plain);
    ModelSummary summary = summarize(file);
    split_.routed_expert_bytes = summary.routed_expert_bytes;
    if (options.budget_bytes > 0 && summary.resident_bytes > options.budget_bytes) {
      throw Error(ErrorCode::budget, "budget " + human_bytes(options.budget_bytes) + " cannot hold the " +
                                         human_bytes(summary.resident_bytes) + " of resident weights of '" +
                                         options.model_path + "'");
    }
  }

  LoadOptions load;
  load.widen_f16_to_f32 = options.widen_f16_to_f32;
  // Widening F16 to F32 is a conversion of loaded tensors; streamed shards are the file's bytes,
  // so a widened run keeps its experts in core.
  const bool stream = !options.in_core && !options.widen_f16_to_f32;
  if (options.widen_f16_to_f32 && !options.in_core) {
    if (options.budget_bytes > 0 || options.cache_experts > 0) {
      throw Error(ErrorCode::invalid_argument, "--widen-f16 keeps every expert in RAM; it cannot be combined with a budget");
    }
    notices_.push_back("--widen-f16: experts are widened and held in RAM (no streaming)");
  }
  load.load_routed_experts = !stream;
  if (index) {
    // Resident tensors (and in-core experts) are checked as they land, like streamed shards.
    load.check_tensor = [&index](const GgufTensorInfo& t, std::span<const std::byte> bytes) {
      const IndexedTensor* it = index->find(t.name);
      if (!it || it->file_offset != t.file_offset || it->bytes != bytes.size() || it->n_parts == 0) return true;
      const uint64_t part = it->part_bytes();
      for (uint32_t p = 0; p < it->n_parts; ++p) {
        if (!index->verify(t.name, p, bytes.subspan(p * part, part))) return false;
      }
      return true;
    };
  }
  model_ = std::make_unique<Model>(Model::load(plain, load));
  if (stream && model_->config().n_expert == 0) {
    // A dense model has nothing to stream; run it in core. (Read the config only after this:
    // a reference taken before the reload would dangle.)
    model_.reset();
    load.load_routed_experts = true;
    model_ = std::make_unique<Model>(Model::load(plain, load));
  }
  const bool streaming = stream && model_->config().n_expert > 0;  // `config` died with a reload

  if (streaming) {
    verifying_ = index.has_value();
    auto source = std::make_unique<CachedExpertSource>(
        model_->gguf(), model_->config(), build_shard_layout(model_->gguf(), model_->config(), index ? &*index : nullptr));
    streamed_ = source.get();
    experts_ = std::move(source);
  } else {
    experts_ = std::make_unique<InCoreExpertSource>(*model_);
  }
  ExpertSource* source = experts_.get();
  if (options.gpu) {
    tracked_ = std::make_unique<TrackedExpertSource>(*experts_, static_cast<int>(model_->config().n_expert));
    source = tracked_.get();
  }
  session_ = std::make_unique<Session>(*model_, *source, *pool_, options.session);

  split_.resident_weights = model_->weight_bytes();
  split_.kv_cache = session_->kv_cache().bytes();
  split_.scratch = session_->scratch_bytes();
  split_.budget = options.budget_bytes;
  if (!streaming) {
    if (!options.warm_profile.empty()) {
      notices_.push_back("--warm: every expert is in RAM already (nothing streams); the profile is not used");
    }
    if (options.budget_bytes > 0 && split_.total() > options.budget_bytes) {
      throw budget_error(split_, options.budget_bytes, options.model_path);
    }
    attach_gpu();
    return;
  }

  const cache::ShardLayout& layout = streamed_->layout().layout;
  // Plan with the reader's alignment, as the cache will: slots leave room for O_DIRECT placement.
  const uint32_t alignment = cache::usable_alignment(reader_->alignment());
  uint64_t all_experts_arena = cache::plan_cache(layout, UINT64_MAX / 4, alignment).arena_bytes;
  split_.expert_min = cache::plan_cache(layout, all_experts_arena, alignment).min_bytes;
  uint64_t fixed = split_.resident_weights + split_.kv_cache + split_.scratch;
  uint64_t arena_budget = all_experts_arena;
  if (options.budget_bytes > 0) {
    if (options.budget_bytes < fixed + split_.expert_min) throw budget_error(split_, options.budget_bytes, options.model_path);
    arena_budget = std::min(all_experts_arena, options.budget_bytes - fixed);
  } else if (options.cache_experts > 0) {
    arena_budget = std::max<uint64_t>(split_.expert_min,
                                      static_cast<uint64_t>(std::ceil(options.cache_experts * static_cast<double>(all_experts_arena))));
    arena_budget = std::min(arena_budget, all_experts_arena);
  }
  cache::ShardCacheOptions copts;
  copts.budget_bytes = arena_budget;
  copts.policy = options.policy;
  copts.policy_options = options.policy_options;
  if (!options.warm_profile.empty()) {
    cache::check_profile_matches(warm_profile_, layout.n_layer(), layout.n_expert, options.warm_profile);
    warm_keys_ = cache::rank_by_use(warm_profile_);
    if (copts.policy_options.profile == nullptr) copts.policy_options.profile = &warm_profile_;
  }
  cache_ = std::make_unique<cache::ShardCache>(layout, *reader_, copts);
  streamed_->attach(*cache_);
  split_.expert_arena = cache_->plan().arena_bytes;
  if (options.budget_bytes == 0 && options.cache_experts > 0) split_.budget = split_.total();
  attach_gpu();
}

void Engine::attach_gpu() {
  if (!options_.gpu) return;
  gpu_ = make_gpu_tier(*model_, *tracked_, *pool_, session_->n_batch(),
                       cache_ ? cache_->arena_span() : std::span<std::byte>{}, options_.gpu_options);
  session_->set_matmul_offload(gpu_.get());
}

cache::WarmResult Engine::warm_up(const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!cache_ || warm_keys_.empty()) return {};
  return cache::warm_start(*cache_, warm_keys_, progress);
}

Engine::~Engine() {
  // The session may hold pins through the expert source; drop them before the cache goes.
  session_.reset();
  gpu_.reset();  // finishes copies out of the RAM arena and unregisters it
  tracked_.reset();
  experts_.reset();
  cache_.reset();
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

std::string Engine::describe_budget() const {
  std::string s = split_.budget ? "budget " + human_bytes(split_.budget) : std::string("budget unlimited");
  s += ": resident weights " + human_bytes(split_.resident_weights) + " + KV cache " + human_bytes(split_.kv_cache) +
       " + scratch " + human_bytes(split_.scratch);
  if (cache_) {
    double frac = split_.routed_expert_bytes
                      ? static_cast<double>(split_.expert_arena) / static_cast<double>(split_.routed_expert_bytes)
                      : 0;
    char buf[64];
    std::snprintf(buf, sizeof buf, " (%.0f%% of routed experts)", std::min(1.0, frac) * 100);
    s += " + expert cache " + human_bytes(split_.expert_arena) + buf;
  } else {
    s += " (experts in core)";
  }
  s += " = " + human_bytes(split_.total());
  return s;
}

}  // namespace sluice::core
