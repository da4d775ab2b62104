// sluice bench: `bench io`, `bench kernels`, or a measured run of a model (`bench -m MODEL`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/units.h"
#include "app/bench.h"
#include "core/gguf/gguf.h"
#include "core/gpu/gpu_tier.h"
#include "core/gpu/vram_expert_cache.h"
#include "core/gguf/model_summary.h"
#include "io/bandwidth_probe.h"
#include "io/pread_reader.h"
#include "io/fault_reader.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"
#include "tools/expert_parallel_flag.h"
#include "tools/session_flags.h"
#include "tools/memory_flags.h"
#include "tools/progress_bar.h"
#include "tools/routing_outputs.h"
#include "tools/verify_flag.h"

namespace sluice::tools {

namespace {

// --expert-parallel: one row per rank of one run's decode figures, gathered on rank 0.
struct RankRow {
  double hit_rate, hits, misses, decode_bytes_read, read_bytes_per_token, disk_gbps_achieved, decode_tok_s,
      decode_s_per_token, compute_s_per_token, exchange_s_per_token, exchange_bytes_per_token, io_wait_share,
      expert_arena_bytes, exchange_wait_s_per_token;
};
constexpr size_t kRankFields = sizeof(RankRow) / sizeof(double);

std::vector<RankRow> gather_ranks(core::ExpertParallel& ep, const core::BenchResult& r) {
  const RankRow mine{r.hit_rate, static_cast<double>(r.decode_hits), static_cast<double>(r.decode_misses),
                     static_cast<double>(r.decode_bytes_read), r.read_bytes_per_token, r.disk_gbps_achieved,
                     r.decode_tok_s, r.decode_s_per_token, r.compute_s_per_token, r.exchange_s_per_token,
                     r.exchange_bytes_per_token, r.io_wait_share, static_cast<double>(r.expert_arena_bytes),
                     r.exchange_wait_s_per_token};
  const std::vector<double> all = ep.gather({reinterpret_cast<const double*>(&mine), kRankFields});
  std::vector<RankRow> rows(all.size() / kRankFields);
  std::memcpy(rows.data(), all.data(), rows.size() * sizeof(RankRow));
  return rows;
}

// Hits over demand accesses of every rank's cache together (1 when nothing was accessed).
double total_hit_rate(const std::vector<RankRow>& rows) {
  double h = 0, a = 0;
  for (const auto& x : rows) h += x.hits, a += x.hits + x.misses;
  return a > 0 ? h / a : 1.0;
}

nlohmann::json ranks_json(const std::vector<RankRow>& rows) {
  nlohmann::json ranks = nlohmann::json::array();
  double arena = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RankRow& x = rows[i];
    arena += x.expert_arena_bytes;
    ranks.push_back({{"rank", i},
                     {"hit_rate", x.hit_rate},
                     {"hits", x.hits},
                     {"misses", x.misses},
                     {"decode_bytes_read", x.decode_bytes_read},
                     {"read_bytes_per_token", x.read_bytes_per_token},
                     {"disk_gbps_achieved", x.disk_gbps_achieved},
                     {"decode_tok_s", x.decode_tok_s},
                     {"compute_s_per_token", x.compute_s_per_token},
                     {"exchange_s_per_token", x.exchange_s_per_token},
                     {"exchange_wait_s_per_token", x.exchange_wait_s_per_token},
                     {"exchange_bytes_per_token", x.exchange_bytes_per_token},
                     {"io_wait_share", x.io_wait_share},
                     {"expert_arena_bytes", x.expert_arena_bytes}});
  }
  return {{"n_ranks", rows.size()}, {"total_hit_rate", total_hit_rate(rows)}, {"total_expert_arena_bytes", arena},
          {"ranks", ranks}};
}

void print_ranks(const std::vector<RankRow>& rows) {
  std::printf("expert parallel, %zu ranks: total hit %.1f%%\n", rows.size(), total_hit_rate(rows) * 100);
  std::printf("%6s %8s %10s %8s %9s %11s %11s %9s %10s %10s\n", "rank", "hit", "MB/token", "GB/s", "decode",
              "compute ms", "exchange ms", "wait ms", "xchg KB", "arena");
  for (size_t i = 0; i < rows.size(); ++i) {
    const RankRow& x = rows[i];
    std::printf("%6zu %7.1f%% %10.3f %8.2f %9.2f %11.3f %11.3f %9.3f %10.1f %10s\n", i, x.hit_rate * 100,
                x.read_bytes_per_token / 1e6, x.disk_gbps_achieved, x.decode_tok_s, x.compute_s_per_token * 1e3,
                x.exchange_s_per_token * 1e3, x.exchange_wait_s_per_token * 1e3, x.exchange_bytes_per_token / 1e3,
                human_bytes(static_cast<uint64_t>(x.expert_arena_bytes)).c_str());
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

nlohmann::json layers_json(const core::BenchResult& r) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : r.layers) {
    a.push_back({{"prediction_recall", l.prediction_recall},
                 {"prediction_precision", l.prediction_precision},
                 {"previous_token_recall", l.previous_token_recall},
                 {"speculative_wasted_bytes", l.speculative_wasted_bytes},
                 {"hidden_miss_share", l.hidden_miss_share}});
  }
  return a;
}

// An optional figure: its value, or null when it does not exist (e.g. no ceiling without a probe).
nlohmann::json maybe(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

std::string maybe_text(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

nlohmann::json to_json(const core::BenchResult& r) {
  return {{"budget_bytes", r.budget_bytes},
          {"model_bytes", r.model_bytes},
          {"cache_experts_fraction", r.cache_experts_fraction},
          {"routing_entropy", r.routing_entropy},
          {"hottest_over_uniform", r.hottest_over_uniform},
          {"temporal_reuse", r.temporal_reuse},
          {"temporal_reuse_chance", r.temporal_reuse_chance},
          {"prefill_tok_s", r.prefill_tok_s},
          {"prefill_bytes_read", r.prefill_bytes_read},
          {"prefill_io_wait_share", r.prefill_io_wait_share},
          {"prefill_read_ahead_bytes", r.prefill_read_ahead_bytes},
          {"prefill_read_ahead_wasted_bytes", r.prefill_read_ahead_wasted_bytes},
          {"decode_tok_s", r.decode_tok_s},
          {"decode_first8_tok_s", r.decode_first8_tok_s},
          {"hit_rate", r.hit_rate},
          {"decode_hits", r.decode_hits},
          {"decode_misses", r.decode_misses},
          {"expert_arena_bytes", r.expert_arena_bytes},
          {"decode_s_per_token", r.decode_s_per_token},
          {"compute_s_per_token", r.compute_s_per_token},
          {"exchange_s_per_token", r.exchange_s_per_token},
          {"exchange_bytes_per_token", r.exchange_bytes_per_token},
          {"hit_rate_first8", r.hit_rate_first8},
          {"hit_rate_steady", r.hit_rate_steady},
          {"read_bytes_per_token_first8", r.read_bytes_per_token_first8},
          {"read_bytes_per_token_steady", r.read_bytes_per_token_steady},
          {"read_bytes_per_token", r.read_bytes_per_token},
          {"miss_bytes_per_token", r.miss_bytes_per_token},
          {"speculative_bytes_per_token", r.speculative_bytes_per_token},
          {"disk_gbps_achieved", r.disk_gbps_achieved},
          {"disk_gbps_raw", maybe(r.disk_gbps_raw)},
          {"ceiling_tok_s", maybe(r.ceiling_tok_s)},
          {"achieved_over_ceiling", maybe(r.achieved_over_ceiling)},
          {"ceiling_note", r.ceiling_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.ceiling_note)},
          {"io_wait_share", r.io_wait_share},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"page_cache_growth_bytes", r.page_cache_growth_bytes},
          {"evictions", r.evictions},
          {"warm_shards", r.warm_shards},
          {"warm_bytes", r.warm_bytes},
          {"warm_seconds", r.warm_seconds},
          {"prefetch_depth", r.prefetch_depth},
          {"prediction_recall", r.prediction_recall},
          {"prediction_precision", r.prediction_precision},
          {"previous_token_recall", r.previous_token_recall},
          {"speculative_waste_bytes_per_token", r.speculative_waste_bytes_per_token},
          {"io_hidden_share", r.io_hidden_share},
          {"layers", layers_json(r)},
          {"io_backend", r.io_backend},
          {"budget_split", r.budget_split},
          {"gpu", r.gpu},
          {"gpu_tier", r.gpu_tier},
          {"gpu_vram_bytes", r.gpu_vram_bytes},
          {"gpu_resident_bytes", r.gpu_resident_bytes},
          {"gpu_expert_slots", r.gpu_expert_slots},
          {"gpu_expert_hit_rate", r.gpu_expert_hit_rate},
          {"gpu_products", r.gpu_products},
          {"gpu_cpu_products", r.gpu_cpu_products},
          {"gpu_experts_copied", r.gpu_experts_copied},
          {"gpu_copy_bytes", r.gpu_copy_bytes},
          {"gpu_cpu_fallbacks", r.gpu_cpu_fallbacks},
          {"gpu_upload_bytes", r.gpu_upload_bytes},
          {"gpu_evictions", r.gpu_evictions},
          {"gpu_h2d_gbps", r.gpu_h2d_gbps},
          {"gpu_cpu_matvec_gbps", r.gpu_cpu_matvec_gbps}};
}

// tok/s and hit rate against budget, one polyline each.
std::string plot_svg(const std::vector<core::BenchResult>& runs) {
  const double w = 640, h = 400, left = 60, right = 60, top = 30, bottom = 50;
  double max_budget = 1, max_tok = 1e-9;
  for (const auto& r : runs) {
    max_budget = std::max(max_budget, static_cast<double>(r.budget_bytes));
    max_tok = std::max(max_tok, r.decode_tok_s);
  }
  auto x = [&](double b) { return left + b / max_budget * (w - left - right); };
  auto y = [&](double frac) { return h - bottom - frac * (h - top - bottom); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h << "' font-family='sans-serif' font-size='12'>\n";
  s << "<rect width='100%' height='100%' fill='white'/>\n";
  s << "<line x1='" << left << "' y1='" << y(0) << "' x2='" << w - right << "' y2='" << y(0) << "' stroke='black'/>\n";
  s << "<line x1='" << left << "' y1='" << y(0) << "' x2='" << left << "' y2='" << y(1) << "' stroke='black'/>\n";
  s << "<line x1='" << w - right << "' y1='" << y(0) << "' x2='" << w - right << "' y2='" << y(1) << "' stroke='black'/>\n";
  s << "<text x='" << w / 2 << "' y='" << h - 12 << "' text-anchor='middle'>budget (GiB)</text>\n";
  s << "<text x='14' y='" << h / 2 << "' transform='rotate(-90 14 " << h / 2 << ")' text-anchor='middle' fill='steelblue'>decode tok/s (max " << max_tok << ")</text>\n";
  s << "<text x='" << w - 14 << "' y='" << h / 2 << "' transform='rotate(90 " << w - 14 << " " << h / 2 << ")' text-anchor='middle' fill='darkorange'>hit rate</text>\n";
  for (int i = 0; i <= 4; ++i) {
    double b = max_budget * i / 4;
    s << "<text x='" << x(b) << "' y='" << y(0) + 16 << "' text-anchor='middle'>" << std::round(b / (1 << 30) * 100) / 100 << "</text>\n";
    s << "<text x='" << w - right + 4 << "' y='" << y(i / 4.0) + 4 << "'>" << i * 25 << "%</text>\n";
  }
  auto line = [&](auto value, const char* color) {
    s << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (const auto& r : runs) s << x(static_cast<double>(r.budget_bytes)) << "," << y(value(r)) << " ";
    s << "'/>\n";
    for (const auto& r : runs) s << "<circle cx='" << x(static_cast<double>(r.budget_bytes)) << "' cy='" << y(value(r)) << "' r='3' fill='" << color << "'/>\n";
  };
  line([&](const core::BenchResult& r) { return r.decode_tok_s / max_tok; }, "steelblue");
  line([&](const core::BenchResult& r) { return r.hit_rate; }, "darkorange");
  s << "</svg>\n";
  return s.str();
}

// The runs: one budget, or a sweep.
std::vector<core::BenchOptions> bench_runs(const cxxopts::ParseResult& args, const core::BenchOptions& base,
                                           uint64_t file_bytes) {
  std::vector<core::BenchOptions> runs;
  auto with_budget = [&base, file_bytes](const std::string& text) {
    core::BenchOptions o = base;
    o.engine.budget_bytes = parse_budget_flag(text, file_bytes);
    return o;
  };
  auto with_fraction = [&base, file_bytes](const std::string& text) {
    core::BenchOptions o = base;
    o.engine.cache_experts = parse_cache_experts_flag(text);
    return o;
  };
  int modes = static_cast<int>(args.count("budget") + args.count("cache-experts") + args.count("budgets") +
                               args.count("cache-experts-sweep"));
  if (modes > 1) throw Error(ErrorCode::invalid_argument, "give one of --budget, --cache-experts, --budgets, --cache-experts-sweep");
  if (args.count("budget")) runs.push_back(with_budget(args["budget"].as<std::string>()));
  if (args.count("cache-experts")) runs.push_back(with_fraction(args["cache-experts"].as<std::string>()));
  if (args.count("budgets")) for (const auto& b : split_list(args["budgets"].as<std::string>())) runs.push_back(with_budget(b));
  if (args.count("cache-experts-sweep")) for (const auto& f : split_list(args["cache-experts-sweep"].as<std::string>())) runs.push_back(with_fraction(f));
  if (runs.empty()) runs.push_back(base);  // unlimited

  return runs;
}

// Raw disk bandwidth of this file, shard-sized O_DIRECT reads, queue depths 1..64 (0: not probed).
double probe_disk(const cxxopts::ParseResult& args, const core::BenchOptions& base, const std::string& path,
                  uint64_t shard_bytes) {
  io::BandwidthOptions probe;
  probe.read_size = std::max<uint64_t>(4096, shard_bytes);
  probe.seconds_per_depth = args["probe-seconds"].as<double>();
  if (!(probe.seconds_per_depth >= 0))
    throw Error(ErrorCode::invalid_argument, "--probe-seconds must be 0 (no probe, no ceiling) or more");
  probe.max_bytes_per_depth = 4ull << 30;
  probe.io.kind = base.engine.io.kind;
  if (!(probe.seconds_per_depth > 0)) return 0;
  if (base.cold) core::evict_from_page_cache(path);
  return io::probe_bandwidth(path, probe).max_gb_per_s;

}

// The text report: the results table, per-rank rows, ceilings, the GPU line and the last run's
// routing and prefetch figures.
void print_text_report(const std::string& path, uint64_t file_bytes, double disk_raw,
                       const std::vector<core::BenchResult>& results, const std::vector<std::vector<RankRow>>& rank_rows) {
  std::printf("model %s (%s), io %s, raw disk %s\n", path.c_str(), human_bytes(file_bytes).c_str(),
              results[0].io_backend.c_str(), disk_raw > 0 ? maybe_text(disk_raw, "%.2f GB/s").c_str() : "not probed");
  std::printf("%10s %7s %9s %9s %9s %8s %10s %8s %9s %7s %7s %10s\n", "budget", "experts", "prefill", "decode",
              "first8", "hit", "MB/token", "GB/s", "ceiling", "ach/ceil", "iowait", "peak RSS");
  for (const auto& r : results) {
    std::printf("%10s %6.0f%% %9.2f %9.2f %9.2f %7.1f%% %10.2f %8.2f %9s %8s %6.0f%% %10s\n",
                human_bytes(r.budget_bytes).c_str(), r.cache_experts_fraction * 100, r.prefill_tok_s, r.decode_tok_s,
                r.decode_first8_tok_s, r.hit_rate * 100, r.read_bytes_per_token / 1e6, r.disk_gbps_achieved,
                maybe_text(r.ceiling_tok_s, "%.2f").c_str(), maybe_text(r.achieved_over_ceiling, "%.2f").c_str(),
                r.io_wait_share * 100, human_bytes(r.peak_rss_bytes).c_str());
  }
  for (const auto& rows : rank_rows) print_ranks(rows);
  std::vector<std::string> notes;
  for (const auto& r : results) {
    if (!r.ceiling_note.empty() && std::find(notes.begin(), notes.end(), r.ceiling_note) == notes.end()) {
      notes.push_back(r.ceiling_note);
      std::printf("ceiling: %s\n", r.ceiling_note.c_str());
    }
  }
  for (const auto& r : results) {
    if (!r.gpu) continue;
    std::printf("gpu (decode): %llu products on the GPU, %llu on the CPU, VRAM expert hits %.1f%%, copied up %llu (%s), "
                "CPU fallbacks %llu, uploaded %s, %llu VRAM evictions; H2D %.1f GB/s, CPU matvec %.1f GB/s\n",
                static_cast<unsigned long long>(r.gpu_products), static_cast<unsigned long long>(r.gpu_cpu_products),
                r.gpu_expert_hit_rate * 100, static_cast<unsigned long long>(r.gpu_experts_copied),
                human_bytes(r.gpu_copy_bytes).c_str(), static_cast<unsigned long long>(r.gpu_cpu_fallbacks),
                human_bytes(r.gpu_upload_bytes).c_str(), static_cast<unsigned long long>(r.gpu_evictions),
                r.gpu_h2d_gbps, r.gpu_cpu_matvec_gbps);
  }
  const auto& r = results.back();
  std::printf("routing: entropy %.3f, hottest %.2fx uniform, temporal reuse %.3f (chance %.3f)\n", r.routing_entropy,
              r.hottest_over_uniform, r.temporal_reuse, r.temporal_reuse_chance);
  std::printf("prefetch depth %d: recall %.3f, precision %.3f (previous token's experts: recall %.3f), "
              "read %.2f MB/token on misses + %.2f MB/token speculative (%.2f MB/token of it wasted), IO hidden %.0f%%\n",
              r.prefetch_depth, r.prediction_recall, r.prediction_precision, r.previous_token_recall,
              r.miss_bytes_per_token / 1e6, r.speculative_bytes_per_token / 1e6,
              r.speculative_waste_bytes_per_token / 1e6, r.io_hidden_share * 100);
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const auto& x = r.layers[l];
    std::printf("  moe layer %2zu: recall %.3f  precision %.3f  prev-token recall %.3f  wasted %8.2f MB  misses hidden %.0f%%\n",
                l, x.prediction_recall, x.prediction_precision, x.previous_token_recall,
                static_cast<double>(x.speculative_wasted_bytes) / 1e6, x.hidden_miss_share * 100);
  }
}

// One run's options from the flags (the budget comes per run: bench_runs).
core::BenchOptions read_bench_base(const cxxopts::ParseResult& args, const std::string& path) {
  core::BenchOptions base;
  base.engine.model_path = path;
  const SessionFlags sf = read_session_flags(args, false);
  for (const auto& note : sf.notes) std::fprintf(stderr, "sluice bench: %s\n", note.c_str());
  base.engine.threads = sf.threads;
  read_io_flags(args, {.io_faults = true}, base.engine);
  base.engine.session.n_batch = sf.n_batch;
  base.engine.session.kv_type = GgmlType::F16;
  read_mla_attn_flag(args[kMlaAttnFlag].as<std::string>(), base.engine.session);
  base.engine.session.n_logit_rows = 1;  // generation samples from the last row only
  base.engine.session.prefetch_depth = args["prefetch-depth"].as<int>();
  if (base.engine.session.prefetch_depth < 0 || base.engine.session.prefetch_depth > 64)
    throw Error(ErrorCode::invalid_argument, "--prefetch-depth " + std::to_string(base.engine.session.prefetch_depth) + " must be in [0, 64]");
  base.n_prompt = args["n-prompt"].as<int>();
  base.n_gen = args["n-gen"].as<int>();
  base.cold = args.count("cold") > 0;
  base.seed = args["seed"].as<uint64_t>();
  read_gpu_flags(args, base.engine);
  return base;
}

// The JSON report: an object for one run, an array for a sweep.
void print_json_report(const std::vector<core::BenchResult>& results, const std::vector<std::vector<RankRow>>& rank_rows,
                       bool expert_parallel) {
  auto run_json = [&](size_t i) {
    nlohmann::json j = to_json(results[i]);
    if (expert_parallel) j["expert_parallel"] = ranks_json(rank_rows[i]);
    return j;
  };
  if (results.size() == 1) {
    std::cout << run_json(0).dump(1) << "\n";
    return;
  }
  nlohmann::json a = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i) a.push_back(run_json(i));
  std::cout << a.dump(1) << "\n";
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "io") == 0) return cmd_bench_io(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "kernels") == 0) return cmd_bench_kernels(argc - 1, argv + 1);
  return cmd_bench_model(argc, argv);
}

int cmd_bench_model(int argc, char** argv) {
  cxxopts::Options options("sluice bench", "Measure decode and prefill of a model inside a budget.\n"
                                           "  sluice bench io -m FILE       raw random-read bandwidth per queue depth\n"
                                           "  sluice bench kernels          matvec throughput per weight type\n");
  options.add_options()
      ("m,model", "GGUF model file", cxxopts::value<std::string>())
      ("budget", "memory budget (e.g. 2G, 512M, or 10% of the model file)", cxxopts::value<std::string>())
      ("cache-experts", "size the budget so the expert cache holds this share of routed experts (e.g. 10%)", cxxopts::value<std::string>())
      ("budgets", "sweep: comma-separated budgets", cxxopts::value<std::string>())
      ("cache-experts-sweep", "sweep: comma-separated percentages, e.g. 5,10,25,50,100", cxxopts::value<std::string>())
      ("p,n-prompt", "prompt tokens (random, from --seed)", cxxopts::value<int>()->default_value("128"))
      ("n,n-gen", "generated tokens", cxxopts::value<int>()->default_value("64"))
      ("b,batch-size", "prefill batch size", cxxopts::value<int64_t>()->default_value("512"))
      ("t,threads", "worker threads", cxxopts::value<unsigned>()->default_value("2"))
      ("io", "IO backend: auto, uring or pread", cxxopts::value<std::string>()->default_value("auto"))
      ("policy", "expert cache eviction policy (adaptive, lru, lfu, lru-quota, freq, hot-pin, predict)", cxxopts::value<std::string>()->default_value("adaptive"))
      (kRouteFlag, kRouteFlagHelp, cxxopts::value<std::string>()->default_value("exact"))
      (kMlaAttnFlag, kMlaAttnFlagHelp, cxxopts::value<std::string>()->default_value("auto"))
      ("gpu", "use the first CUDA GPU (VRAM tier above the RAM cache)")
      ("vram", "VRAM for --gpu (e.g. 20G; default: free VRAM minus a margin)", cxxopts::value<std::string>())
      ("vram-policy", "VRAM expert cache policy with --gpu: lru or freq", cxxopts::value<std::string>()->default_value("lru"))
      (kVerifyFlag, kVerifyFlagHelp, cxxopts::value<std::string>()->default_value("on"))
      ("io-faults", "testing: inject IO faults into expert shard reads (see sluice run --help)", cxxopts::value<std::string>())
      ("prefetch-depth", "predict the experts of this many MoE layers ahead and read them early (0: off)", cxxopts::value<int>()->default_value(std::to_string(core::kDefaultPrefetchDepth)))
      ("cold", "evict the model file from the page cache before each run")
      ("drop-caches", "as root, also drop all clean page cache (echo 1 > /proc/sys/vm/drop_caches)")
      ("probe-seconds", "seconds per queue depth when measuring raw disk bandwidth", cxxopts::value<double>()->default_value("1"))
      ("seed", "seed of the random prompt", cxxopts::value<uint64_t>()->default_value("1"))
      ("json", "print JSON (an object per run; an array for a sweep)")
      ("plot", "write an SVG of tok/s and hit rate vs budget", cxxopts::value<std::string>())
      ("h,help", "show this help");
  add_routing_options(options);
  add_expert_parallel_option(options);
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m MODEL.gguf is required (or 'bench io' / 'bench kernels')");
  const std::string path = args["model"].as<std::string>();
  const bool json = args.count("json") > 0;

  core::BenchOptions base = read_bench_base(args, path);
  if (base.engine.gpu) core::require_gpu();  // before probing the disk
  const std::unique_ptr<core::ExpertParallel> ep = join_expert_parallel(args, base.engine);
  base.parallel = ep.get();
  const bool leader = !ep || ep->leader();
  quiet_follower_stdout(ep.get());
  RoutingOutputs routing(args, path);
  base.engine.warm_profile = routing.warm_profile();
  base.recorder = routing.recorder();
  if (base.engine.session.n_batch < 1) throw Error(ErrorCode::invalid_argument, "-b must be at least 1");

  uint64_t file_bytes = 0, shard_bytes = 0;
  {
    io::PreadReader reader(path);
    auto summary = core::summarize(core::GgufFile::parse(reader));
    file_bytes = summary.file_bytes;
    shard_bytes = summary.expert_shard_bytes / 3;  // one extent: a tensor's slice of one expert
  }

  std::vector<core::BenchOptions> runs = bench_runs(args, base, file_bytes);

  if (args.count("drop-caches")) {
    std::ofstream drop("/proc/sys/vm/drop_caches");
    if (!drop || !(drop << "1" << std::flush)) {
      throw Error(ErrorCode::invalid_argument, "--drop-caches needs root (cannot write /proc/sys/vm/drop_caches)");
    }
  }

  const double disk_raw = probe_disk(args, base, path, shard_bytes);

  std::vector<core::BenchResult> results;
  std::vector<std::vector<RankRow>> rank_rows;  // per run, with --expert-parallel (rank 0)
  std::vector<std::string> said;  // notices already printed (a sweep repeats them)
  for (auto& o : runs) {
    o.disk_gbps_raw = disk_raw;
    ProgressBar bar("warm start");
    o.warm_progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
    results.push_back(core::run_bench(o));
    bar.finish();
    const auto& r = results.back();
    if (ep) rank_rows.push_back(gather_ranks(*ep, r));
    if (!leader) continue;
    for (const auto& notice : r.notices) {
      if (std::find(said.begin(), said.end(), notice) != said.end()) continue;
      said.push_back(notice);
      std::fprintf(stderr, "sluice bench: %s\n", notice.c_str());
    }
    if (!json) {
      std::fprintf(stderr, "%s\n", r.budget_split.c_str());
      if (r.gpu) std::fprintf(stderr, "%s\n", r.gpu_tier.c_str());
      if (r.warm_shards) std::fprintf(stderr, "%s\n", describe_warm(r.warm_shards, r.warm_bytes, r.warm_seconds).c_str());
    }
    if (!r.fault_report.empty()) std::fprintf(stderr, "sluice bench: %s\n", r.fault_report.c_str());
  }
  if (!leader) return 0;
  routing.write("bench");

  if (json) print_json_report(results, rank_rows, ep != nullptr);
  else print_text_report(path, file_bytes, disk_raw, results, rank_rows);
  if (args.count("plot")) {
    std::ofstream out(args["plot"].as<std::string>());
    out << plot_svg(results);
    if (!out) throw Error(ErrorCode::io_error, "cannot write --plot '" + args["plot"].as<std::string>() + "'");
  }
  return 0;
}

}  // namespace sluice::tools
