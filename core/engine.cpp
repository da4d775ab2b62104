#include "core/engine.h"

#include <algorithm>
#include <cmath>

#include "cache/arena.h"
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

}  // namespace

Engine::Engine(const EngineOptions& options) : options_(options) {
  if (options.budget_bytes > 0 && options.cache_experts > 0) {
    throw Error(ErrorCode::invalid_argument, "--budget and --cache-experts are alternatives; give one");
  }
  if (options.cache_experts < 0 || options.cache_experts > 1) {
    throw Error(ErrorCode::invalid_argument, "--cache-experts must be in (0%, 100%]");
  }
  io::OpenedReader opened = io::open_reader(options.model_path, options.io);
  reader_ = std::move(opened.reader);
  notices_ = std::move(opened.notices);
  pool_ = std::make_unique<kernels::ThreadPool>(std::max(1u, options.threads));

  // Reserve before reading: check the resident part against the budget from the tensor
  // directory alone, before any weight is loaded.
  {
    GgufFile file = GgufFile::parse(*reader_);
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
  model_ = std::make_unique<Model>(Model::load(*reader_, load));
  const ModelConfig& config = model_->config();
  if (stream && config.n_expert == 0) {
    // A dense model has nothing to stream; run it in core.
    model_.reset();
    load.load_routed_experts = true;
    model_ = std::make_unique<Model>(Model::load(*reader_, load));
  }
  const bool streaming = stream && config.n_expert > 0;

  if (streaming) {
    std::optional<ShardIndex> index;
    if (options.verify) index = ShardIndex::load(options.model_path, model_->gguf(), *reader_);
    verifying_ = index.has_value();
    auto source = std::make_unique<CachedExpertSource>(
        model_->gguf(), model_->config(), build_shard_layout(model_->gguf(), model_->config(), index ? &*index : nullptr));
    streamed_ = source.get();
    experts_ = std::move(source);
  } else {
    experts_ = std::make_unique<InCoreExpertSource>(*model_);
  }
  session_ = std::make_unique<Session>(*model_, *experts_, *pool_, options.session);

  split_.resident_weights = model_->weight_bytes();
  split_.kv_cache = session_->kv_bytes();
  split_.scratch = session_->scratch_bytes();
  split_.budget = options.budget_bytes;
  if (!streaming) {
    if (options.budget_bytes > 0 && split_.total() > options.budget_bytes) {
      throw budget_error(split_, options.budget_bytes, options.model_path);
    }
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
  cache_ = std::make_unique<cache::ShardCache>(layout, *reader_, copts);
  streamed_->attach(*cache_);
  split_.expert_arena = cache_->plan().arena_bytes;
  if (options.budget_bytes == 0 && options.cache_experts > 0) split_.budget = split_.total();
}

Engine::~Engine() {
  // The session may hold pins through the expert source; drop them before the cache goes.
  session_.reset();
  experts_.reset();
  cache_.reset();
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
