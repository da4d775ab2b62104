#include "tools/engine_flags.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "common/units.h"
#include "core/gpu/vram_expert_cache.h"
#include "io/fault_reader.h"
#include "tools/llama_flags.h"
#include "tools/memory_flags.h"
#include "tools/verify_flag.h"

namespace sluice::tools {

// Whether --in-core maps the file when neither --mmap nor --no-mmap is given. Not by default,
// unlike llama.cpp: on the VM of docs/results.md the mapped load ran at the disk's rate but prefill
// and decode over the mapped pages ran at 0.4-0.8 of the same over sluice's own memory, after a
// cold load (the hypervisor backs the two kinds of page differently).
constexpr bool kMapInCoreByDefault = false;

void add_engine_flags(cxxopts::Options& options, const EngineFlagSet& set) {
  options.add_options()
      ("m,model", "GGUF model file", cxxopts::value<std::string>())
      ("budget", "memory ceiling for everything sluice allocates for the model (29G = 29 GiB, 512M, or 10% of the file)", cxxopts::value<std::string>())
      ("cache-experts", "size the budget so the expert cache holds this share of all routed experts (e.g. 25%)", cxxopts::value<std::string>())
      ("in-core", "load the routed experts into RAM too (no cache, no streaming)")
      ("mmap", "with --in-core: use the weights in place in the page cache (a read-only mapping of the file)")
      ("no-mmap", "with --in-core: read the weights into sluice's own memory")
      ("io", "IO backend: auto, uring or pread", cxxopts::value<std::string>()->default_value("auto"))
      ("policy", "expert cache eviction policy (adaptive, lru, lfu, lru-quota, freq, hot-pin, predict)", cxxopts::value<std::string>()->default_value("adaptive"))
      (kRouteFlag, kRouteFlagHelp, cxxopts::value<std::string>()->default_value("exact"))
      (kVerifyFlag, kVerifyFlagHelp, cxxopts::value<std::string>()->default_value("on"));
  if (set.widen_f16) options.add_options()("widen-f16", "convert F16 weights to F32 at load");
  if (set.io_faults)
    options.add_options()("io-faults", "testing: inject IO faults into expert shard reads, e.g. seed=7,short=0.1,eagain=0.1,delay=0.2,eio=0.05,flip=0.01,fail_at=OFFSET,uring_fail=1", cxxopts::value<std::string>());
  if (set.gpu)
    options.add_options()
        ("gpu", "use the first CUDA GPU: weights that fit and the hottest experts in VRAM, above the RAM cache")
        ("vram", "VRAM for --gpu (e.g. 20G; default: free VRAM minus a margin); separate from --budget", cxxopts::value<std::string>())
        ("vram-policy", "VRAM expert cache policy with --gpu: lru or freq", cxxopts::value<std::string>()->default_value("lru"));
  add_kv_type_options(options);
  options.add_options()(kMlaAttnFlag, kMlaAttnFlagHelp, cxxopts::value<std::string>()->default_value("auto"));
}

void read_mla_attn_flag(const std::string& value, core::SessionOptions& o) {
  if (value == "auto") return;
  if (value == "absorbed") {
    o.mla_decompress_cells = -1;
  } else if (value == "decompressed") {
    o.mla_decompress_cells = 0;
    o.mla_decompress_tokens = 2;
  } else {
    throw Error(ErrorCode::invalid_argument, "--mla-attn '" + value + "': give auto, absorbed or decompressed");
  }
}

void read_gpu_flags(const cxxopts::ParseResult& args, core::EngineOptions& eo) {
  eo.gpu = args.count("gpu") > 0;
  if (!eo.gpu && (args.count("vram") || args.count("vram-policy")))
    throw Error(ErrorCode::invalid_argument, "--vram and --vram-policy need --gpu");
  if (args.count("vram")) {
    eo.gpu_options.vram_bytes = parse_size(args["vram"].as<std::string>(), "--vram");
    if (eo.gpu_options.vram_bytes == 0) throw Error(ErrorCode::invalid_argument, "--vram must be more than 0 bytes");
  }
  eo.gpu_options.policy = args["vram-policy"].as<std::string>();
  core::VramExpertCache::parse_policy(eo.gpu_options.policy);  // reject a bad name before loading
}

void read_io_flags(const cxxopts::ParseResult& args, const EngineFlagSet& set, core::EngineOptions& eo) {
  eo.io.kind = io::parse_io_kind(args["io"].as<std::string>());
  eo.policy = args["policy"].as<std::string>();
  eo.session.route = core::parse_route_policy(args[kRouteFlag].as<std::string>());
  apply_verify_flag(args[kVerifyFlag].as<std::string>(), eo);
  if (set.io_faults && args.count("io-faults")) eo.faults = io::parse_fault_options(args["io-faults"].as<std::string>());
}

// --mmap / --no-mmap (llama.cpp's spellings). Only an in-core run maps the file: under a budget the
// resident weights must stay in memory the budget counts, which the page cache is not.
void read_mmap_flags(const cxxopts::ParseResult& args, core::EngineOptions& eo) {
  const bool on = args.count("mmap") > 0, off = args.count("no-mmap") > 0;
  if (on && off) throw Error(ErrorCode::invalid_argument, "--mmap and --no-mmap contradict each other; give one");
  if (on && !eo.in_core)
    throw Error(ErrorCode::invalid_argument,
                "--mmap needs --in-core (under --budget or --cache-experts the resident weights are read into the budget)");
  eo.map_file = eo.in_core && (on || (!off && kMapInCoreByDefault));
}

core::EngineOptions read_engine_flags(const cxxopts::ParseResult& args, const EngineFlagSet& set, const SessionFlags& sf) {
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m MODEL.gguf is required");
  core::EngineOptions eo;
  eo.model_path = args["model"].as<std::string>();
  eo.threads = sf.threads;
  eo.widen_f16_to_f32 = set.widen_f16 && args.count("widen-f16") > 0;
  eo.in_core = args.count("in-core") > 0;
  read_io_flags(args, set, eo);
  eo.session.n_ctx = sf.n_ctx;
  eo.session.n_batch = sf.n_ctx > 0 ? std::min(sf.n_batch, sf.n_ctx) : sf.n_batch;
  eo.session.kv_type = kv_type_from(args);
  read_mla_attn_flag(args[kMlaAttnFlag].as<std::string>(), eo.session);
  if (args.count("budget"))
    eo.budget_bytes = parse_budget_flag(args["budget"].as<std::string>(), std::filesystem::file_size(eo.model_path));
  if (args.count("cache-experts")) eo.cache_experts = parse_cache_experts_flag(args["cache-experts"].as<std::string>());
  if (set.gpu) read_gpu_flags(args, eo);
  if (eo.in_core && (eo.budget_bytes || eo.cache_experts > 0))
    throw Error(ErrorCode::invalid_argument, "--in-core loads every expert; it cannot be combined with --budget or --cache-experts");
  read_mmap_flags(args, eo);
  return eo;
}

void add_sampling_flags(cxxopts::Options& options) {
  options.add_options()
      ("temp", "temperature (0: greedy)", cxxopts::value<float>()->default_value("0"))
      ("top-k", "top-k filter (0: off)", cxxopts::value<int>()->default_value("40"))
      ("top-p", "top-p filter (1: off)", cxxopts::value<float>()->default_value("0.95"))
      ("min-p", "min-p filter (0: off)", cxxopts::value<float>()->default_value("0.05"))
      ("repeat-penalty", "repetition penalty (1: off)", cxxopts::value<float>()->default_value("1"))
      ("repeat-last-n", "tokens the repetition penalty looks back", cxxopts::value<int>()->default_value("64"))
      ("s,seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("0"));
}

core::SamplerOptions read_sampling_flags(const cxxopts::ParseResult& args) {
  return {.temperature = args["temp"].as<float>(),
          .top_k = args["top-k"].as<int>(),
          .top_p = args["top-p"].as<float>(),
          .min_p = args["min-p"].as<float>(),
          .repeat_penalty = args["repeat-penalty"].as<float>(),
          .repeat_last_n = args["repeat-last-n"].as<int>(),
          .seed = args["seed"].as<uint64_t>()};
}

}  // namespace sluice::tools
