// sluice doctor [-m MODEL] [--budget SIZE] [--json]: checks this machine for out-of-core runs
// (app/doctor.h) and, with a model, recommends a budget and the decode range to expect.
// Exit code 1 when a check fails (e.g. a cgroup limit below --budget).
//
// --json fields (stable): ok (bool), kernel_level, cpu_features [..], checks [{name, status
// ("ok"|"warn"|"fail"), detail}], and with -m: recommendation {usable_bytes, budget_bytes,
// cache_experts (0..1), in_core, disk_gbps, tok_s_low, tok_s_high}.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/units.h"
#include "app/doctor.h"
#include "tools/commands.h"
#include "tools/memory_flags.h"

namespace sluice::tools {

int cmd_doctor(int argc, char** argv) {
  cxxopts::Options options("sluice doctor", "Check io_uring, O_DIRECT, locked memory, the cgroup limit, the CPU and the disk; "
                                            "with -m, recommend a budget");
  options.add_options()
      ("m,model", "GGUF model file to plan for (also probes its disk)", cxxopts::value<std::string>())
      ("budget", "the budget you intend to use (checked against the cgroup limit and memlock)", cxxopts::value<std::string>())
      ("probe-seconds", "disk probe length in seconds (0: skip)", cxxopts::value<double>()->default_value("3"))
      ("json", "print JSON")
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  core::DoctorOptions o;
  if (args.count("model")) o.model_path = args["model"].as<std::string>();
  if (args.count("budget")) {
    const uint64_t file = o.model_path.empty() ? 0 : std::filesystem::file_size(o.model_path);
    if (o.model_path.empty() && is_percent(args["budget"].as<std::string>()))
      throw Error(ErrorCode::invalid_argument, "--budget as a percentage needs -m MODEL");
    o.budget_bytes = parse_budget_flag(args["budget"].as<std::string>(), file);
  }
  o.probe_seconds = args["probe-seconds"].as<double>();
  if (o.probe_seconds < 0 || o.probe_seconds > 60) throw Error(ErrorCode::invalid_argument, "--probe-seconds must be in [0, 60]");

  const core::DoctorReport r = core::run_doctor(o);
  if (args.count("json")) {
    nlohmann::ordered_json j;
    j["ok"] = r.ok();
    j["kernel_level"] = r.kernel_level;
    j["cpu_features"] = r.cpu_features;
    j["checks"] = nlohmann::ordered_json::array();
    for (const auto& c : r.checks) j["checks"].push_back({{"name", c.name}, {"status", core::to_string(c.status)}, {"detail", c.detail}});
    if (r.recommendation) {
      const auto& rec = *r.recommendation;
      j["recommendation"] = {{"usable_bytes", rec.usable_bytes}, {"budget_bytes", rec.budget_bytes},
                             {"cache_experts", rec.cache_experts}, {"in_core", rec.in_core},
                             {"disk_gbps", rec.disk_gbps}, {"tok_s_low", rec.tok_s_low}, {"tok_s_high", rec.tok_s_high}};
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& c : r.checks) std::printf("%-9s %-4s  %s\n", c.name.c_str(), core::to_string(c.status), c.detail.c_str());
    if (r.recommendation) {
      const auto& rec = *r.recommendation;
      if (rec.in_core) {
        std::printf("\nrecommend: --in-core (the whole file fits in the %s this machine can use)\n", human_bytes(rec.usable_bytes).c_str());
      } else {
        std::printf("\nrecommend: --budget %s (%.0f%% of the routed experts cached, --cache-experts %.0f%%)\n",
                    human_bytes(rec.budget_bytes).c_str(), 100 * rec.cache_experts, 100 * rec.cache_experts);
        if (rec.disk_gbps > 0)
          std::printf("expect: %.2f-%.2f tok/s decode, disk-bound at %.2f GB/s (hit rate between the cache share and 1.5x it)\n",
                      rec.tok_s_low, rec.tok_s_high, rec.disk_gbps);
      }
    }
  }
  return r.ok() ? 0 : 1;
}

}  // namespace sluice::tools
