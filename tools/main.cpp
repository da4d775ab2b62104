// sluice: command-line entry point. Dispatches to subcommands and turns errors into one line.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include <cxxopts.hpp>

#include "app/expert_parallel.h"
#include "common/error.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

// Keep sorted by name; one line per subcommand.
const Command kCommands[] = {
    {"bench", sluice::tools::cmd_bench, "measure a model (tok/s, hit rate, GB/s), or 'bench io' / 'bench kernels'"},
    {"chat", sluice::tools::cmd_chat, "interactive chat; the KV cache is kept between turns"},
    {"demo", sluice::tools::cmd_demo, "synthesize a Kimi-K2-shaped model once, run it out of core, benchmark it"},
    {"doctor", sluice::tools::cmd_doctor, "check io_uring, O_DIRECT, memlock, cgroup, CPU and disk; recommend a budget"},
    {"index", sluice::tools::cmd_index, "digest every shard extent (XXH3-64) into a sidecar manifest"},
    {"inspect", sluice::tools::cmd_inspect, "print a GGUF model's structure, sizes and IO ceilings"},
    {"perplexity", sluice::tools::cmd_perplexity, "perplexity of a text (llama-perplexity's method) and KL divergence"},
    {"run", sluice::tools::cmd_run, "generate text, streaming experts inside a memory budget"},
    {"serve", sluice::tools::cmd_serve, "OpenAI-compatible HTTP server; concurrent requests decode together"},
    {"tokenize", sluice::tools::cmd_tokenize, "print the token ids of a text with a model's vocabulary"},
    {"synth", sluice::tools::cmd_synth, "write a synthetic MoE model with a real model's shapes (GGUF)"},
    {"tune", sluice::tools::cmd_tune, "replay a routing trace through cache policies and budgets"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: sluice <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out, "\nRun 'sluice <command> --help' for the options of one command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  if (name == "--version" || name == "-V") {
    std::printf("sluice %s\n", SLUICE_VERSION);
    return 0;
  }
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const sluice::Error& e) {
      std::fprintf(stderr, "sluice %s: error: %s\n", c.name, e.what());
      sluice::core::abort_expert_parallel(1);
      return 1;
    } catch (const cxxopts::exceptions::exception& e) {
      std::fprintf(stderr, "sluice %s: error: %s (see 'sluice %s --help')\n", c.name, e.what(), c.name);
      sluice::core::abort_expert_parallel(2);
      return 2;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "sluice %s: error: out of memory (a --budget within this machine's RAM, or a smaller -c, "
                           "keeps sluice inside it)\n", c.name);
      sluice::core::abort_expert_parallel(1);
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice %s: internal error: %s\n", c.name, e.what());
      sluice::core::abort_expert_parallel(1);
      return 1;
    }
  }
  std::fprintf(stderr, "sluice: unknown command '%s'\n", argv[1]);
  print_usage(stderr);
  return 2;
}
