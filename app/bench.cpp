#include "app/bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>

#include "common/error.h"
#include "app/decode_meter.h"
#include "app/generate.h"
#include "app/expert_parallel.h"
#include "app/routing_stats.h"
#include "app/trace_recorder.h"

namespace sluice::core {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t proc_field_kib(const char* file, const char* field) {
  std::ifstream in(file);
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoull(line.substr(prefix.size())) * 1024;
  }
  return 0;
}

// Feeds decode-phase routing decisions to RoutingStats, mapping blocks to MoE layers.
class StatsObserver final : public RoutingObserver {
 public:
  StatsObserver(const ExpertGeometry& g, RoutingStats& stats, RoutingObserver* also) : stats_(stats), also_(also) {
    for (int64_t il = 0, moe = 0; il < g.n_layer; ++il) {
      moe_of_block_.push_back(g.moe_layer[static_cast<size_t>(il)] ? static_cast<int>(moe++) : -1);
    }
  }
  void on_routing(const RoutingEvent& event) override {
    if (also_) also_->on_routing(event);  // the trace records prefill too
    add(event.layer, event.experts);
  }
  bool enabled = false;

 private:
  void add(int layer, std::span<const int32_t> experts) {
    if (!enabled) return;
    int moe = moe_of_block_[static_cast<size_t>(layer)];
    if (moe >= 0) stats_.add(moe, experts);
  }
  RoutingStats& stats_;
  RoutingObserver* also_;
  std::vector<int> moe_of_block_;
};

cache::PredictionCounters minus(cache::PredictionCounters a, const cache::PredictionCounters& b) {
  a.steps -= b.steps, a.predicted -= b.predicted, a.actual -= b.actual, a.correct -= b.correct;
  a.issued -= b.issued, a.issued_bytes -= b.issued_bytes, a.wasted -= b.wasted, a.wasted_bytes -= b.wasted_bytes;
  a.previous_steps -= b.previous_steps, a.previous_actual -= b.previous_actual;
  a.previous_correct -= b.previous_correct;
  a.ahead_issued -= b.ahead_issued, a.ahead_issued_bytes -= b.ahead_issued_bytes;
  a.ahead_wasted -= b.ahead_wasted, a.ahead_wasted_bytes -= b.ahead_wasted_bytes;
  return a;
}

double ratio(uint64_t num, uint64_t den) { return den ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }

// What bench measures around the shared generate loop: the prefill's IO and the counters at the
// start of decode (cache, prefetcher, GPU, exchange), and the DecodeMeter's marks around each
// decode forward pass.
class BenchPhases final : public GenerateObserver {
 public:
  BenchPhases(Engine& engine, const BenchOptions& options, StatsObserver* routing, BenchResult& r)
      : meter(options.n_gen, [this] { return since(t_origin); }, [this] { return decode_counters(engine_); }),
        engine_(engine), options_(options), routing_(routing), r_(r) {
    if (engine_.cache()) before_prefill_ = engine_.cache()->stats();
  }
  void on_prefill_end(double prefill_s) override {
    r_.prefill_tok_s = options_.n_prompt / prefill_s;
    if (engine_.cache()) {
      before = engine_.cache()->stats();
      r_.prefill_bytes_read = before.total.bytes_read - before_prefill_.total.bytes_read;
      r_.prefill_io_wait_share =
          static_cast<double>(before.total.io_wait_ns - before_prefill_.total.io_wait_ns) / 1e9 / prefill_s;
    }
    if (engine_.gpu()) gpu_before = engine_.gpu()->counters();
    if (engine_.prefetcher()) {
      predicted_before = engine_.prefetcher()->stats();
      // The prefill's read-aheads (a decode step is too small for one). The next layer's waste is
      // counted when it routes, so the last read-ahead of the prompt is in.
      r_.prefill_read_ahead_bytes = predicted_before.total.ahead_issued_bytes;
      r_.prefill_read_ahead_wasted_bytes = predicted_before.total.ahead_wasted_bytes;
    }
    if (routing_) routing_->enabled = true;
  }
  void on_decode_begin(int64_t index) override {
    if (index != 0) return;
    t_origin = Clock::now();
    exchange_before = options_.parallel ? options_.parallel->stats() : ExchangeStats{};
    if (engine_.cache()) counters_before = engine_.cache()->stats().total;
    meter.start();
  }
  void on_decode_end(int64_t index) override { meter.token_done(static_cast<int>(index)); }

  DecodeMeter meter;
  Clock::time_point t_origin;
  cache::CacheStats before;
  cache::PredictionStats predicted_before;
  GpuCounters gpu_before;
  ExchangeStats exchange_before;
  cache::CacheCounters counters_before;

 private:
  static DecodeCounters decode_counters(Engine& engine) {  // the totals DecodeMeter reads
    DecodeCounters c;
    if (engine.cache()) {
      const cache::CacheStats s = engine.cache()->stats();
      c.cache = s.total;
      c.io_busy_ns = s.io_busy_ns;
    }
    if (engine.prefetcher()) c.predicted = engine.prefetcher()->stats().total;
    return c;
  }
  Engine& engine_;
  const BenchOptions& options_;
  StatsObserver* routing_;
  BenchResult& r_;
  cache::CacheStats before_prefill_;
};

// The decode meter's figures, as reported.
void copy_decode_figures(const DecodeFigures& f, BenchResult& r) {
  r.decode_first8_tok_s = f.decode_first8_tok_s;
  r.decode_tok_s = f.decode_tok_s;
  r.hit_rate = f.hit_rate;
  r.hit_rate_first8 = f.hit_rate_first8;
  r.hit_rate_steady = f.hit_rate_steady;
  r.decode_bytes_read = f.decode_bytes_read;
  r.read_bytes_per_token = f.read_bytes_per_token;
  r.read_bytes_per_token_first8 = f.read_bytes_per_token_first8;
  r.read_bytes_per_token_steady = f.read_bytes_per_token_steady;
  r.miss_bytes_per_token = f.miss_bytes_per_token;
  r.speculative_bytes_per_token = f.speculative_bytes_per_token;
  r.speculative_waste_bytes_per_token = f.speculative_waste_bytes_per_token;
  r.disk_gbps_achieved = f.disk_gbps_achieved;
  r.io_wait_share = f.io_wait_share;
  r.io_hidden_share = f.io_hidden_share;
  r.ceiling_tok_s = f.ceiling_tok_s;
  r.achieved_over_ceiling = f.achieved_over_ceiling;
  r.ceiling_note = f.ceiling_note;
}

// Prediction recall and precision over decode, in total and per MoE layer.
void prediction_figures(Engine& engine, const BenchPhases& phases, BenchResult& r) {
  const cache::CacheStats& before = phases.before;
  const cache::PredictionStats& predicted_before = phases.predicted_before;
  const cache::CacheStats after = engine.cache()->stats();
  r.evictions = after.total.evictions;
  r.prefetch_depth = engine.session().prefetch_depth();
  const cache::PredictionStats p = engine.prefetcher()->stats();
  const cache::PredictionCounters pt = minus(p.total, predicted_before.total);
  r.prediction_recall = pt.recall();
  r.prediction_precision = pt.precision();
  r.previous_token_recall = pt.previous_recall();
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const cache::PredictionCounters pl = minus(p.layers[l], predicted_before.layers[l]);
    const cache::CacheCounters& ca = after.layers[l];
    const cache::CacheCounters& cb = before.layers[l];
    BenchLayer bl;
    bl.prediction_recall = pl.recall();
    bl.prediction_precision = pl.precision();
    bl.previous_token_recall = pl.previous_recall();
    bl.speculative_wasted_bytes = pl.wasted_bytes;
    bl.hidden_miss_share = ratio(ca.prefetch_hits_landed - cb.prefetch_hits_landed,
                                 (ca.prefetch_hits - cb.prefetch_hits) + (ca.misses - cb.misses));
    r.layers.push_back(bl);
  }
}

// The VRAM tier's plan and its decode counters.
void gpu_figures(GpuTier& gpu_tier, const GpuCounters& gpu_before, BenchResult& r) {
  GpuTier* gpu = &gpu_tier;
  const GpuPlan& p = gpu->plan();
  const GpuCounters d = gpu->counters() - gpu_before;
  r.gpu = true;
  r.gpu_tier = gpu->describe();
  r.gpu_vram_bytes = p.vram_budget;
  r.gpu_resident_bytes = p.resident_bytes;
  r.gpu_expert_slots = p.expert_slots;
  r.gpu_expert_hit_rate = d.expert_hits + d.expert_misses
                              ? static_cast<double>(d.expert_hits) / static_cast<double>(d.expert_hits + d.expert_misses)
                              : 0;
  r.gpu_products = d.products_gpu;
  r.gpu_cpu_products = d.products_cpu;
  r.gpu_experts_copied = d.experts_copied;
  r.gpu_copy_bytes = d.expert_copy_bytes;
  r.gpu_cpu_fallbacks = d.expert_cpu_fallbacks;
  r.gpu_upload_bytes = d.upload_bytes;
  r.gpu_evictions = gpu->evictions();
  r.gpu_h2d_gbps = p.rates.h2d_bytes_per_s / 1e9;
  r.gpu_cpu_matvec_gbps = p.rates.cpu_bytes_per_s / 1e9;
}

}  // namespace

void evict_from_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

uint64_t peak_rss_bytes() { return proc_field_kib("/proc/self/status", "VmHWM"); }

void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (clear) clear << "5";
}

uint64_t page_cache_bytes() { return proc_field_kib("/proc/meminfo", "Cached"); }

BenchResult run_bench(const BenchOptions& options) {
  if (options.n_gen < 9) throw Error(ErrorCode::invalid_argument, "-n must be at least 9 (8 warm-up tokens + 1)");
  if (options.n_prompt < 1) throw Error(ErrorCode::invalid_argument, "-p must be at least 1");
  BenchResult r;
  if (options.cold) evict_from_page_cache(options.engine.model_path);
  reset_peak_rss();
  const uint64_t cached_before = page_cache_bytes();

  EngineOptions eo = options.engine;
  const int64_t needed_ctx = options.n_prompt + options.n_gen;
  if (eo.session.n_ctx < needed_ctx) eo.session.n_ctx = needed_ctx;
  // Held in an optional so that the peak below is read after the engine has returned its memory.
  std::optional<Engine> engine_owner;
  Engine& engine = engine_owner.emplace(eo);
  const ExpertGeometry geometry = engine.model().expert_geometry();
  const int64_t n_vocab = engine.n_vocab();
  r.budget_split = engine.describe_budget();
  r.budget_bytes = engine.budget().budget ? engine.budget().budget : engine.budget().total();
  r.model_bytes = engine.reader().file_size();
  r.notices = engine.notices();
  r.io_backend = std::string(engine.reader().backend());
  if (engine.budget().routed_expert_bytes) {
    r.cache_experts_fraction = std::min(1.0, static_cast<double>(engine.cache() ? engine.budget().expert_arena
                                                                                 : engine.budget().routed_expert_bytes) /
                                                 static_cast<double>(engine.budget().routed_expert_bytes));
  }

  int n_moe = 0;
  for (bool moe : geometry.moe_layer) n_moe += moe ? 1 : 0;
  std::optional<RoutingStats> routing;
  std::optional<StatsObserver> observer;
  if (n_moe > 0) {
    routing.emplace(n_moe, static_cast<int>(geometry.n_expert), static_cast<int>(geometry.n_expert_used));
    observer.emplace(geometry, *routing, options.recorder);
    engine.session().set_routing_observer(&*observer);
    if (options.recorder) options.recorder->begin_sequence(geometry, engine.session().n_ctx());
  }
  // Warm start before the first token: its reads are not part of the prefill or decode figures.
  cache::WarmResult warm = engine.warm_up(options.warm_progress);
  r.warm_shards = warm.shards;
  r.warm_bytes = warm.bytes;
  r.warm_seconds = warm.seconds;

  // Random prompt from the seed, as llama-bench does.
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(options.n_prompt));
  for (auto& t : prompt) t = pick(rng);

  // Greedy and exactly n_gen decode forward passes: n_gen tokens, the last one fed too.
  SequenceGenerator seq(n_vocab, engine.n_ctx());
  seq.start(prompt, 0, {.max_tokens = options.n_gen}, {.temperature = 0, .repeat_penalty = 1});
  BenchPhases phases(engine, options, observer ? &*observer : nullptr, r);
  generate(engine, seq, &phases);
  const DecodeMeter& meter = phases.meter;
  const auto& t_origin = phases.t_origin;
  const ExchangeStats& exchange_before = phases.exchange_before;
  const cache::CacheCounters& counters_before = phases.counters_before;
  const DecodeFigures f = meter.figures(options.disk_gbps_raw);
  {
    const double decode_s = since(t_origin), n = options.n_gen;
    r.decode_s_per_token = decode_s / n;
    if (options.parallel) {
      const ExchangeStats x = options.parallel->stats();
      r.exchange_s_per_token = (x.seconds - exchange_before.seconds) / n;
      r.exchange_wait_s_per_token = (x.wait_seconds - exchange_before.wait_seconds) / n;
      r.exchange_bytes_per_token = static_cast<double>(x.bytes_received - exchange_before.bytes_received) / n;
    }
    double io_wait_s = 0;
    if (engine.cache()) {
      const cache::CacheCounters c = engine.cache()->stats().total;
      r.decode_hits = c.hits - counters_before.hits;
      r.decode_misses = c.misses - counters_before.misses;
      io_wait_s = static_cast<double>(c.io_wait_ns - counters_before.io_wait_ns) / 1e9;
      r.expert_arena_bytes = engine.budget().expert_arena;
    }
    r.compute_s_per_token = std::max(0.0, r.decode_s_per_token - r.exchange_s_per_token - io_wait_s / n);
  }
  r.fault_report = engine.describe_faults();
  copy_decode_figures(f, r);
  if (options.disk_gbps_raw > 0) r.disk_gbps_raw = options.disk_gbps_raw;

  if (engine.cache()) prediction_figures(engine, phases, r);
  if (routing) {
    r.routing_entropy = routing->entropy();
    r.hottest_over_uniform = routing->hottest_over_uniform();
    r.temporal_reuse = routing->temporal_reuse();
    r.temporal_reuse_chance = routing->temporal_reuse_chance();
  }
  if (GpuTier* gpu = engine.gpu()) gpu_figures(*gpu, phases.gpu_before, r);
  // The run's high-water mark, read once the engine (cache arena, KV, scratch) is gone: the
  // resident size now is far below it, so a reading of the current size would show here.
  engine_owner.reset();
  r.peak_rss_bytes = peak_rss_bytes();
  r.page_cache_growth_bytes = static_cast<int64_t>(page_cache_bytes()) - static_cast<int64_t>(cached_before);
  return r;
}

}  // namespace sluice::core
