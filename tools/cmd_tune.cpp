// sluice tune --trace FILE: replay a routing trace through eviction policies at several cache
// budgets and recommend one. Thin CLI over cache/tune.h.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <cxxopts.hpp>

#include "cache/trace.h"
#include "cache/tune.h"
#include "common/error.h"
#include "common/units.h"
#include "tools/commands.h"

namespace sluice::tools {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void write_text(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw Error(ErrorCode::invalid_argument, std::string(what) + ": cannot write '" + path + "'");
}

double positive(const cxxopts::ParseResult& args, const char* name) {
  double v = args[name].as<double>();
  if (!(v > 0)) {
    throw Error(ErrorCode::invalid_argument, std::string("--") + name + " must be positive, got " + std::to_string(v));
  }
  return v;
}

}  // namespace

int cmd_tune(int argc, char** argv) {
  cxxopts::Options opts("sluice tune", "Replay a routing trace through expert-cache eviction policies at "
                                       "several budgets; Belady is the clairvoyant bound.");
  std::string all_policies;
  for (const auto& p : cache::policy_names()) all_policies += (all_policies.empty() ? "" : ",") + p;
  opts.add_options()
      ("trace", "routing trace (shared/traces format)", cxxopts::value<std::string>())
      ("budgets", "comma list: % of all routed experts, or sizes (need --shard-mb)",
       cxxopts::value<std::string>()->default_value("5%,10%,25%,50%"))
      ("policies", "comma list of policies (default: all; the learned ones need a trace of 2+ sequences)", cxxopts::value<std::string>())
      ("shard-mb", "bytes of one expert shard (gate+up+down), MiB", cxxopts::value<double>())
      ("resident-gb", "non-expert weights kept in RAM, GiB", cxxopts::value<double>()->default_value("0"))
      ("disk-gbps", "disk read bandwidth, GB/s", cxxopts::value<double>()->default_value("3"))
      ("mem-gbps", "RAM bandwidth that caps tok/s, GB/s", cxxopts::value<double>()->default_value("50"))
      ("lookahead-tokens", "policy 'lookahead' (a bound, like belady): tokens of future routing it sees "
       "beyond the current token", cxxopts::value<uint32_t>()->default_value("2"))
      ("cold", "the learned policies get no profile from the other sequences, as `sluice run` without "
       "--warm (predict learns online only; hot-pin is left out)")
      ("json", "print JSON rows instead of the table")
      ("plot", "write an SVG of hit rate vs budget", cxxopts::value<std::string>())
      ("profile-out", "write the expert-use profile learned from the whole trace", cxxopts::value<std::string>())
      ("h,help", "show this help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\npolicies: %s\n", opts.help().c_str(), all_policies.c_str());
    return 0;
  }
  if (!args.count("trace")) throw Error(ErrorCode::invalid_argument, "--trace FILE is required");
  cache::Trace trace = cache::read_trace(args["trace"].as<std::string>());

  cache::TuneOptions o;
  o.budgets = split_list(args["budgets"].as<std::string>());
  const bool cold = args.count("cold") > 0;
  o.policy_options.learn_profile = !cold;
  if (args.count("policies")) {
    o.policies = split_list(args["policies"].as<std::string>());
  } else {
    std::string note;
    o.policies = cache::default_policies(trace, note, cold);
    if (!note.empty()) std::fprintf(stderr, "sluice tune: %s\n", note.c_str());
  }
  if (args.count("shard-mb")) o.shard_bytes = static_cast<uint64_t>(positive(args, "shard-mb") * (1 << 20));
  o.resident_bytes = static_cast<uint64_t>(args["resident-gb"].as<double>() * (1ull << 30));
  o.disk_gbps = positive(args, "disk-gbps");
  o.mem_gbps = positive(args, "mem-gbps");
  o.policy_options.lookahead_tokens = args["lookahead-tokens"].as<uint32_t>();
  if (o.policy_options.lookahead_tokens == 0) throw Error(ErrorCode::invalid_argument, "--lookahead-tokens must be at least 1");

  cache::TuneReport report = cache::run_tune(trace, o);
  if (args.count("json")) {
    std::fputs(cache::format_tune_json(report).c_str(), stdout);
  } else {
    std::fputs(cache::format_tune_text(report).c_str(), stdout);
  }
  if (args.count("plot")) write_text(args["plot"].as<std::string>(), cache::format_tune_svg(report), "--plot");
  if (args.count("profile-out")) {
    write_text(args["profile-out"].as<std::string>(), cache::format_profile(cache::build_profile(trace)),
               "--profile-out");
  }
  return 0;
}

}  // namespace sluice::tools
