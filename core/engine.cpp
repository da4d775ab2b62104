#include "core/engine.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "cache/arena.h"
#include "cache/trace.h"
#include "common/error.h"
#include "common/units.h"
#include "core/gguf/model_summary.h"
#include "core/llama/in_core_experts.h"

namespace sluice::core {

namespace {

uint64_t mib_ceil(uint64_t bytes) { return (bytes + (1ull << 20) - 1) >> 20; }

// What one way of running needs, in bytes.
struct Need {
  uint64_t resident = 0, layers = 0, kv = 0, scratch = 0, experts = 0, gpu_staging = 0;
  uint64_t total() const { return resident + layers + kv + scratch + experts + gpu_staging; }
};

Error budget_error(const Need& min, uint64_t budget, const std::string& path, bool layers_streamed) {
  std::string parts = "resident weights " + human_bytes(min.resident);
  if (layers_streamed) parts += " + one streamed layer " + human_bytes(min.layers);
  parts += " + KV cache " + human_bytes(min.kv) + " + scratch at batch 1 " + human_bytes(min.scratch) +
           " + one MoE layer's experts " + human_bytes(min.experts);
  if (min.gpu_staging) parts += " + --gpu page-locked staging " + human_bytes(min.gpu_staging);
  return Error(ErrorCode::budget, "budget " + human_bytes(budget) + " is below the minimum " +
                                      std::to_string(mib_ceil(min.total())) + " MiB (" + std::to_string(min.total()) +
                                      " bytes) for '" + path + "' (" + parts + ")");
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
  // --gpu without CUDA or a device is refused after the budget plan (reading the header only)
  // and before anything loads, so a budget too small for the GPU staging is reported first.
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
  // The header, resident tensors and the index load through the plain reader; only streamed
  // expert shards (what the checksums and the re-read guard) see injected faults.
  io::Reader& plain = *plain_reader_;
  pool_ = std::make_unique<kernels::ThreadPool>(std::max(1u, options.threads));

  LoadOptions load;
  load.widen_f16_to_f32 = options.widen_f16_to_f32;
  // Widening F16 to F32 is a conversion of loaded tensors; streamed shards are the file's bytes,
  // so a widened run keeps its experts in core.
  bool stream = !options.in_core && !options.widen_f16_to_f32;
  if (options.widen_f16_to_f32 && !options.in_core) {
    if (options.budget_bytes > 0 || options.cache_experts > 0) {
      throw Error(ErrorCode::invalid_argument, "--widen-f16 keeps every expert in RAM; it cannot be combined with a budget");
    }
    notices_.push_back("--widen-f16: experts are widened and held in RAM (no streaming)");
  }
  if (GgufFile::parse(plain).architecture() == "kimi-k3") {
    if (options.gpu) require_gpu();
    open_kimi_k3(stream);
    return;
  }
  load.load_routed_experts = !stream;
  // Reserve before reading: every size comes from the tensor directory alone.
  Model planned = Model::plan(plain, load);
  const ModelConfig& config = planned.config();
  if (stream && config.n_expert == 0) {
    // A dense model has nothing to stream; run it in core.
    stream = false;
    load.load_routed_experts = true;
    planned = Model::plan(plain, load);
  }
  {
    GgufFile file = GgufFile::parse(plain);
    split_.routed_expert_bytes = summarize(file).routed_expert_bytes;
  }
  SessionOptions session = options.session;
  if (!stream) session.prefetch_depth = 0;  // nothing to read ahead
  const uint64_t kv = Session::kv_bytes_for(config, session);
  // The predictor reads later blocks' router weights, which are not in RAM when layers stream:
  // prefetch is off then, and its scratch is not counted.
  auto scratch_at = [&](int64_t batch, bool layers) {
    SessionOptions o = session;
    o.n_batch = batch;
    if (layers) o.prefetch_depth = 0;
    return Session::scratch_bytes_for(planned, o, options.threads);
  };
  // --gpu: the tier's page-locked staging (RAM outside the arena) at a given batch.
  auto staging_at = [&](int64_t batch) { return options.gpu ? plan_gpu_host_staging(planned, batch).total() : 0; };

  std::optional<ShardIndex> index = index_for_run(verify_mode(), options.model_path, planned.gguf(), plain, notices_);
  verifying_ = index.has_value();
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
  // With --gpu the session sees the experts through a TrackedExpertSource, so the VRAM tier
  // knows which expert a pinned view belongs to.
  auto session_source = [&]() -> ExpertSource& {
    if (!options.gpu) return *experts_;
    tracked_ = std::make_unique<TrackedExpertSource>(*experts_, static_cast<int>(model_->config().n_expert));
    return *tracked_;
  };

  if (!stream) {
    if (!options.warm_profile.empty()) {
      notices_.push_back("--warm: every expert is in RAM already (nothing streams); the profile is not used");
    }
    if (options.gpu) require_gpu();
    model_ = std::make_unique<Model>(Model::load(plain, load));
    experts_ = std::make_unique<InCoreExpertSource>(*model_);
    session_ = std::make_unique<Session>(*model_, session_source(), *pool_, session);
    split_.resident_weights = model_->weight_bytes();
    split_.kv_cache = session_->kv_bytes();
    split_.scratch = session_->scratch_bytes();
    split_.gpu_staging = staging_at(session.n_batch);
    split_.budget = options.budget_bytes;
    split_.n_batch = session.n_batch;
    split_.min_budget = split_.total();
    if (options.budget_bytes > 0 && split_.total() > options.budget_bytes) {
      throw Error(ErrorCode::budget, "budget " + human_bytes(options.budget_bytes) + " is below the " +
                                         human_bytes(split_.total()) + " an in-core run of '" + options.model_path +
                                         "' needs (all weights + KV cache + scratch" +
                                         (split_.gpu_staging ? " + --gpu page-locked staging" : "") + ")");
    }
    attach_gpu();
    return;
  }

  // The expert cache's plan, with the reader's alignment as the cache will use it.
  const uint32_t alignment = cache::usable_alignment(reader_->alignment());
  StreamedLayout expert_layout = build_shard_layout(planned.gguf(), ExpertGeometry::of(config), index ? &*index : nullptr);
  const uint64_t all_experts_arena = cache::plan_cache(expert_layout.layout, UINT64_MAX / 4, alignment).arena_bytes;
  split_.expert_min = cache::plan_cache(expert_layout.layout, all_experts_arena, alignment).min_bytes;

  // The layer-streaming plan: what stays resident and one / two / all units of the rest.
  LoadOptions lean_load = load;
  lean_load.stream_layer_tensors = true;
  Model lean = Model::plan(plain, lean_load);
  const bool can_stream_layers = !lean.streamed().empty();
  uint64_t layer_min = 0, layer_two = 0;
  if (can_stream_layers) {
    const cache::ShardLayout ll = build_layer_plan(lean).layout;
    const uint64_t layer_all = cache::plan_cache(ll, UINT64_MAX / 4, alignment).arena_bytes;
    layer_min = cache::plan_cache(ll, layer_all, alignment).min_bytes;
    layer_two = std::min(layer_all, 2 * layer_min);
  }
  auto need = [&](bool layers, uint64_t layer_arena, int64_t batch) {
    return Need{layers ? lean.weight_bytes() : planned.weight_bytes(), layers ? layer_arena : 0, kv, scratch_at(batch, layers),
                split_.expert_min, staging_at(batch)};
  };
  Need minimum = need(false, 0, 1);
  bool min_streams = false;
  if (can_stream_layers && need(true, layer_min, 1).total() < minimum.total()) {
    minimum = need(true, layer_min, 1);
    min_streams = true;
  }
  split_.min_budget = minimum.total();

  bool stream_layers = false;
  uint64_t layer_arena = 0;
  if (options.budget_bytes > 0) {
    const uint64_t budget = options.budget_bytes;
    if (budget < minimum.total()) throw budget_error(minimum, budget, options.model_path, min_streams);
    const int64_t requested = session.n_batch;
    bool found = false;
    for (int64_t batch = requested; batch >= 1 && !found; --batch) {
      if (need(false, 0, batch).total() <= budget) {
        found = true;
      } else if (can_stream_layers && need(true, layer_min, batch).total() <= budget) {
        found = stream_layers = true;
        layer_arena = need(true, layer_two, batch).total() <= budget ? layer_two : layer_min;
      }
      if (found) session.n_batch = batch;
    }
    if (!found) throw budget_error(minimum, budget, options.model_path, min_streams);
    if (session.n_batch < requested) {
      notices_.push_back("budget: prompt batch lowered from " + std::to_string(requested) + " to " +
                         std::to_string(session.n_batch) + " tokens so the scratch fits (" +
                         human_bytes(scratch_at(session.n_batch, stream_layers)) + " instead of " +
                         human_bytes(scratch_at(requested, stream_layers)) +
                         ")");
    }
  }

  if (stream_layers && options.gpu) {
    throw Error(ErrorCode::unsupported, "--gpu with a budget that streams layers is not supported yet; raise --budget to " +
                                            human_bytes(need(false, 0, session.n_batch).total()) + " or more");
  }
  if (stream_layers && session.prefetch_depth > 0) {
    notices_.push_back("prefetch: off while layers stream (the predictor needs the next layers' router weights in RAM)");
    session.prefetch_depth = 0;
  }
  if (options.gpu) require_gpu();
  if (stream_layers) {
    load = lean_load;
    io::OpenedReader second = io::open_reader(options.model_path, options.io);
    layer_reader_ = std::move(second.reader);
  }
  model_ = std::make_unique<Model>(Model::load(plain, load));
  auto source = std::make_unique<CachedExpertSource>(model_->gguf(), ExpertGeometry::of(model_->config()),
                                                     std::move(expert_layout));
  streamed_ = source.get();
  experts_ = std::move(source);
  if (stream_layers) layers_ = std::make_unique<StreamedLayers>(*model_, build_layer_plan(*model_, index ? &*index : nullptr));
  session_ = std::make_unique<Session>(*model_, session_source(), *pool_, session, layers_.get());

  split_.resident_weights = model_->weight_bytes();
  split_.kv_cache = session_->kv_bytes();
  split_.scratch = session_->scratch_bytes();
  split_.gpu_staging = staging_at(session.n_batch);
  split_.budget = options.budget_bytes;
  split_.n_batch = session.n_batch;

  if (stream_layers) {
    cache::ShardCacheOptions lopts;
    lopts.budget_bytes = layer_arena;
    lopts.policy = "lru";
    if (verifying_) {
      const uint32_t layer_alignment = cache::usable_alignment(layer_reader_->alignment());
      lopts.verify = [plan = &layers_->plan(), layer_alignment](cache::ShardKey key, std::span<const std::byte> slot) {
        verify_unit(*plan, key, slot, layer_alignment);
      };
    }
    layer_cache_ = std::make_unique<cache::ShardCache>(layers_->plan().layout, *layer_reader_, lopts);
    layers_->attach(*layer_cache_);
    split_.layer_arena = layer_cache_->plan().arena_bytes;
  }

  attach_expert_cache(all_experts_arena, budget_error(minimum, options.budget_bytes, options.model_path, min_streams));
  attach_gpu();
}

VerifyMode Engine::verify_mode() const {
  if (!options_.verify) return VerifyMode::off;
  return options_.require_index ? VerifyMode::require : VerifyMode::on;
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
  cache_ = std::make_unique<cache::ShardCache>(streamed_->layout().layout, *reader_, copts);
  streamed_->attach(*cache_);
  split_.expert_arena = cache_->plan().arena_bytes;
  if (options.budget_bytes == 0 && options.cache_experts > 0) split_.budget = split_.total();
}

std::span<const float> Engine::forward(std::span<const int32_t> tokens, int64_t start_pos, bool all_logits) {
  if (cache_) cache_->begin_token();
  if (layer_cache_) layer_cache_->begin_token();
  if (k3_session_) return k3_session_->forward(tokens, start_pos, all_logits);
  return session_->forward(tokens, start_pos, all_logits);
}

std::span<const float> Engine::forward_batch(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                             std::span<const int64_t> positions, std::span<const uint8_t> want_logits) {
  if (k3_session_) throw Error(ErrorCode::unsupported, "batched sequences are not built for kimi-k3 models yet");
  if (cache_) cache_->begin_token();
  if (layer_cache_) layer_cache_->begin_token();
  return session_->forward_batch(tokens, seqs, positions, want_logits);
}

Session& Engine::session() {
  if (!session_) throw Error(ErrorCode::unsupported, "this command does not run kimi-k3 models yet");
  return *session_;
}

const Model& Engine::model() const {
  if (!model_) throw Error(ErrorCode::unsupported, "this command does not run kimi-k3 models yet");
  return *model_;
}

const GgufFile& Engine::gguf() const { return k3_model_ ? k3_model_->gguf() : model_->gguf(); }
std::string Engine::describe_model() const {
  return k3_model_ ? k3_model_->config().describe() : model_->config().describe();
}
int64_t Engine::n_vocab() const { return k3_model_ ? k3_model_->config().n_vocab : model_->config().n_vocab; }
int64_t Engine::n_ctx() const { return k3_session_ ? k3_session_->n_ctx() : session_->n_ctx(); }
int64_t Engine::n_batch() const { return k3_session_ ? k3_session_->n_batch() : session_->n_batch(); }

Engine::~Engine() {
  // The session may hold pins through the expert source; drop them before the cache goes.
  k3_session_.reset();
  session_.reset();
  gpu_.reset();  // finishes copies out of the RAM arena and unregisters it
  tracked_.reset();
  experts_.reset();
  layers_.reset();
  cache_.reset();
  layer_cache_.reset();
}

std::string Engine::describe_budget() const {
  std::string s = split_.budget ? "budget " + human_bytes(split_.budget) : std::string("budget unlimited");
  s += ": resident weights " + human_bytes(split_.resident_weights);
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
  } else {
    s += " (experts in core)";
  }
  s += " = " + human_bytes(split_.total());
  return s;
}

}  // namespace sluice::core
