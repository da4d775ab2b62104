// sluice demo: the whole story on a fresh machine, with no model download.
//
//   1. synthesizes a Kimi-K2-shaped model of a few GB once (real per-layer shapes and shard sizes,
//      fewer layers and experts), cached under --dir so later demos start at step 2;
//   2. generates a short text out of core with --cache-experts 25% and live per-token stats;
//   3. benchmarks the same model cold (from disk) and prints the bench summary: tok/s, hit rate,
//      bytes read per token, the disk-bound ceiling and how close sluice gets to it.
// Each step is the real subcommand (synth, run, bench) called with the arguments it prints, so a
// user can rerun or vary any of them by hand.
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>

#include "common/error.h"
#include "tools/commands.h"

namespace sluice::tools {

namespace {

// Runs a subcommand in-process with argv built from strings, echoing it as a shell line first.
int run_step(int (*command)(int, char**), const std::string& name, std::vector<std::string> args) {
  std::string line = "sluice " + name;
  for (const std::string& a : args) line += (a.find(' ') != std::string::npos ? " '" + a + "'" : " " + a);
  std::printf("\n$ %s\n", line.c_str());
  std::fflush(stdout);
  args.insert(args.begin(), "sluice " + name);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = command(static_cast<int>(args.size()), argv.data());
  std::fflush(stdout);
  return rc;
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  cxxopts::Options options("sluice demo",
                           "Synthesize a Kimi-K2-shaped model once (a few GB, cached in --dir), generate text out of "
                           "core with 25% of the experts cached and live stats, then benchmark it cold");
  options.add_options()
      ("dir", "data directory for the synthesized model", cxxopts::value<std::string>()->default_value("data"))
      ("preset", "model to imitate (see 'sluice synth --help')", cxxopts::value<std::string>()->default_value("kimi-k2"))
      ("layers", "blocks of the synthesized model", cxxopts::value<int64_t>()->default_value("3"))
      ("experts", "routed experts per MoE block", cxxopts::value<int64_t>()->default_value("96"))
      ("quant", "quantization mix of the synthesized model", cxxopts::value<std::string>()->default_value("Q2_K"))
      ("cache-experts", "share of routed expert bytes the cache holds", cxxopts::value<std::string>()->default_value("25%"))
      ("n,n-gen", "tokens to generate (and to decode in the bench)", cxxopts::value<int>()->default_value("16"))
      ("t,threads", "worker threads (default: all cores)", cxxopts::value<unsigned>())
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  const std::string preset = args["preset"].as<std::string>();
  const std::string layers = std::to_string(args["layers"].as<int64_t>());
  const std::string experts = std::to_string(args["experts"].as<int64_t>());
  const std::string quant = args["quant"].as<std::string>();
  const std::string cache_experts = args["cache-experts"].as<std::string>();
  const int n_gen = args["n-gen"].as<int>();
  if (n_gen < 1 || n_gen > 4096) throw Error(ErrorCode::invalid_argument, "-n " + std::to_string(n_gen) + ": must be 1..4096");
  const unsigned threads =
      args.count("threads") ? args["threads"].as<unsigned>() : std::max(1u, std::thread::hardware_concurrency());

  namespace fs = std::filesystem;
  const fs::path dir = args["dir"].as<std::string>();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(ErrorCode::io_error, "--dir " + dir.string() + ": cannot create it: " + ec.message());
  const fs::path model = dir / ("demo-" + preset + "-" + layers + "L-" + experts + "e-" + quant + ".gguf");

  if (fs::exists(model)) {
    std::printf("sluice demo: using the model synthesized earlier: %s\n", model.string().c_str());
  } else {
    // Written under a temporary name and renamed when complete, so an interrupted demo never
    // leaves a truncated file that a later demo would take for the cached model.
    const fs::path partial = model.string() + ".partial";
    const int rc = run_step(cmd_synth, "synth",
                            {"--preset", preset, "--layers", layers, "--experts", experts, "--quant", quant, "-o",
                             partial.string()});
    if (rc != 0) return rc;
    fs::rename(partial, model, ec);
    if (ec) throw Error(ErrorCode::io_error, "cannot rename " + partial.string() + " to " + model.string() + ": " + ec.message());
  }

  const std::string t = std::to_string(threads);
  const std::string n = std::to_string(n_gen);
  int rc = run_step(cmd_run, "run",
                    {"-m", model.string(), "--cache-experts", cache_experts, "--stats", "-p",
                     "The model stays on disk; the experts stream in as the router asks for them.", "-n", n, "-t", t});
  if (rc != 0) return rc;
  // The bench reports the first 8 decoded tokens apart from the rest, so it decodes at least 12.
  const std::string bench_n = std::to_string(std::max(n_gen, 12));
  rc = run_step(cmd_bench_model, "bench",
                {"-m", model.string(), "--cache-experts", cache_experts, "--cold", "-p", "16", "-n", bench_n, "-b", "16",
                 "-t", t, "--probe-seconds", "0.5"});
  if (rc != 0) return rc;
  std::printf("\nsluice demo: done. The model stays in %s for the next demo; 'rm %s' frees the disk space.\n",
              dir.string().c_str(), model.string().c_str());
  return 0;
}

}  // namespace sluice::tools
