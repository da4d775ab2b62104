// sluice synth --preset NAME -o OUT.gguf: a synthetic MoE model with a real model's shapes.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <cxxopts.hpp>

#include "common/error.h"
#include "common/units.h"
#include "core/gguf/gguf_split_writer.h"
#include "synth/synth.h"
#include "tools/commands.h"

namespace sluice::tools {

namespace {

// "\r[##########..........]  48%  8.1 GiB / 17.0 GiB  1.2 GiB/s" on stderr, at most 5 times a second.
class ProgressBar {
 public:
  void operator()(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const int width = 30;
    const int fill = total ? static_cast<int>(static_cast<double>(done) / total * width) : width;
    std::string bar(fill, '#');
    bar.resize(width, '.');
    const double rate = secs > 0 ? done / secs : 0;
    std::fprintf(stderr, "\r[%s] %3d%%  %s / %s  %s/s   ", bar.c_str(),
                 total ? static_cast<int>(100.0 * done / total) : 100, human_bytes(done).c_str(),
                 human_bytes(total).c_str(), human_bytes(static_cast<uint64_t>(rate)).c_str());
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

int cmd_synth(int argc, char** argv) {
  cxxopts::Options options("sluice synth",
                           "Write a synthetic MoE model (GGUF) with a real model's per-layer shapes, random weights, "
                           "llama-quantize's type mix and calibrated routing");
  options.add_options()
      ("preset", "model to imitate: " + core::synth::preset_names(), cxxopts::value<std::string>())
      ("layers", "number of blocks (the real count or fewer); dense lead blocks are kept", cxxopts::value<int64_t>()->default_value("4"))
      ("experts", "routed experts per MoE block (default: the model's)", cxxopts::value<int64_t>())
      ("expert-ff", "FF width of every expert, routed and shared: a multiple of 256 up to the model's (default: the "
                    "model's); K2's hidden size with smaller experts", cxxopts::value<int64_t>())
      ("quant", "llama-quantize file type: " + core::synth::file_type_names() +
                    " (default Q4_K_M; MXFP4_MOE for kimi-k3, whose experts ship as MXFP4)", cxxopts::value<std::string>())
      ("vocab", "copy the tokenizer (tokenizer.* keys) from this GGUF instead of the built-in byte-level one", cxxopts::value<std::string>())
      ("skew", "routing concentration: 0 uniform, 1 calibrated to real models, larger is hotter", cxxopts::value<double>()->default_value("1"))
      ("seed", "random seed; the same options and seed give the same file", cxxopts::value<uint64_t>()->default_value("1"))
      ("o,output", "output GGUF path (with --split-max-size: the parts are named OUT-00001-of-0000N.gguf)", cxxopts::value<std::string>())
      ("split-max-size", "write the model in parts as llama.cpp's gguf-split does: at most SIZE of tensor data per part "
                         "(decimal K, M, G as gguf-split: 2G = 2,000,000,000 bytes)", cxxopts::value<std::string>())
      ("estimate", "after writing, route a sampled hidden-state process through every MoE block's stored router and print the statistics")
      ("q,quiet", "no progress bar")
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("preset"))
    throw Error(ErrorCode::invalid_argument, "--preset is required (known: " + core::synth::preset_names() + ")");
  core::synth::SynthOptions o;
  o.preset = args["preset"].as<std::string>();
  const int64_t layers = args["layers"].as<int64_t>();
  if (layers < 1 || layers > 100000)
    throw Error(ErrorCode::invalid_argument, "--layers " + std::to_string(layers) + ": must be at least 1");
  o.layers = static_cast<uint32_t>(layers);
  if (args.count("experts")) {
    const int64_t e = args["experts"].as<int64_t>();
    if (e < 2 || e > 100000) throw Error(ErrorCode::invalid_argument, "--experts " + std::to_string(e) + ": must be at least 2");
    o.experts = static_cast<uint32_t>(e);
  }
  if (args.count("expert-ff")) {
    const int64_t f = args["expert-ff"].as<int64_t>();
    if (f < 256 || f > 1000000) throw Error(ErrorCode::invalid_argument, "--expert-ff " + std::to_string(f) + ": must be at least 256");
    o.expert_ff = static_cast<uint32_t>(f);
  }
  o.quant = args.count("quant") ? args["quant"].as<std::string>() : core::synth::find_preset(o.preset).default_quant;
  if (args.count("vocab")) o.vocab_path = args["vocab"].as<std::string>();
  o.skew = args["skew"].as<double>();
  o.seed = args["seed"].as<uint64_t>();
  if (!args.count("output")) throw Error(ErrorCode::invalid_argument, "-o/--output OUT.gguf is required");
  o.out = args["output"].as<std::string>();
  if (args.count("split-max-size")) o.split_max_bytes = core::parse_split_size(args["split-max-size"].as<std::string>());

  ProgressBar bar;
  const bool quiet = args.count("quiet") > 0;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (!quiet) bar(done, total);
  };
  const core::synth::SynthResult r = core::synth::synthesize(o, progress);
  const core::synth::Preset& p = r.plan.preset;
  const std::string what = r.paths.size() > 1 ? std::to_string(r.paths.size()) + " parts " + r.paths.front() + " .. " +
                                                    r.paths.back()
                                              : r.paths.front();
  std::printf("wrote %s: %s (%llu bytes) in %.1f s, %s/s\n", what.c_str(), human_bytes(r.bytes).c_str(),
              static_cast<unsigned long long>(r.bytes), r.seconds,
              human_bytes(static_cast<uint64_t>(r.seconds > 0 ? r.bytes / r.seconds : 0)).c_str());
  std::printf("model: %s (%s), %u blocks (%u dense + %u MoE), %u experts (%u used, %u shared), vocab %u, %s\n",
              p.name.c_str(), p.arch_name.c_str(), p.n_layer, p.n_layer_dense_lead, p.n_moe_layers(), p.n_expert,
              p.n_expert_used, p.n_expert_shared, r.plan.n_vocab, std::string(r.plan.file_type->name).c_str());
  if (p.n_moe_layers() > 0)
    std::printf("routing design: context share of router logit variance %.3f (calibrated for %.1fx reuse over chance)\n",
                r.plan.ctx_share, 2.2);
  if (args.count("estimate") && p.n_moe_layers() > 0) {
    std::printf("estimated routing (sampled hidden states, %u sequences x %u tokens; real models: entropy >= 0.97, "
                "hottest <= 2.5x, reuse 1.5x-3x chance):\n",
                r.plan.process.n_seq, r.plan.process.n_tok);
    for (uint32_t b = p.n_layer_dense_lead; b < p.n_layer; ++b) {
      const auto d = core::synth::block_router_design(r.plan, o.skew, b);
      core::synth::HiddenProcess h = r.plan.process;
      h.seed = o.seed + 1000 + b;
      const auto s = core::synth::estimate_routing(d, core::synth::block_router(r.plan, o, b), h);
      std::printf("  blk.%-3u entropy %.3f  hottest %.2fx  reuse %.3f vs %.3f chance (%.2fx)\n", b, s.entropy_norm,
                  s.hottest_ratio, s.reuse, s.reuse_shuffled, s.reuse_ratio());
    }
  }
  return 0;
}

}  // namespace sluice::tools
