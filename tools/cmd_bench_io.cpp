// sluice bench io: random-read bandwidth of a file at queue depths 1..64 (io/bandwidth_probe.h).
#include <cstdio>
#include <sstream>
#include <string>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/units.h"
#include "io/bandwidth_probe.h"
#include "tools/commands.h"

namespace sluice::tools {

namespace {

std::vector<unsigned> parse_depths(const std::string& text) {
  std::vector<unsigned> depths;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 1 || v > 4096) throw std::invalid_argument(item);
      depths.push_back(static_cast<unsigned>(v));
    } catch (const std::exception&) {
      throw Error(ErrorCode::invalid_argument,
                  "--depths: expected a comma-separated list of depths in [1, 4096], got '" + text + "'");
    }
  }
  if (depths.empty()) throw Error(ErrorCode::invalid_argument, "--depths: empty list");
  return depths;
}

}  // namespace

int cmd_bench_io(int argc, char** argv) {
  cxxopts::Options opts("sluice bench io", "Random-read bandwidth of a file, shard-sized reads, per queue depth");
  opts.add_options()
      ("m,model", "file to read (a GGUF model, or any large file on the same device)", cxxopts::value<std::string>())
      ("read-size", "bytes per read (e.g. 4M, 8M)", cxxopts::value<std::string>()->default_value("8M"))
      ("depths", "queue depths to measure", cxxopts::value<std::string>()->default_value("1,2,4,8,16,32,64"))
      ("seconds", "seconds per depth", cxxopts::value<double>()->default_value("2"))
      ("io", "IO backend: auto (io_uring, else pread), uring or pread", cxxopts::value<std::string>()->default_value("auto"))
      ("no-direct", "read through the page cache instead of O_DIRECT")
      ("misaligned", "land reads 32 bytes off the block alignment (measures the staging copy)")
      ("json", "print one JSON object instead of a table")
      ("h,help", "show this help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "-m FILE is required");

  io::BandwidthOptions options;
  options.read_size = parse_size(args["read-size"].as<std::string>(), "--read-size");
  options.depths = parse_depths(args["depths"].as<std::string>());
  options.seconds_per_depth = args["seconds"].as<double>();
  if (!(options.seconds_per_depth > 0) || options.seconds_per_depth > 3600) {
    throw Error(ErrorCode::invalid_argument, "--seconds must be in (0, 3600]");
  }
  options.io.kind = io::parse_io_kind(args["io"].as<std::string>());
  options.io.direct = !args.count("no-direct");
  options.misaligned = args.count("misaligned") > 0;

  io::BandwidthReport report = io::probe_bandwidth(args["model"].as<std::string>(), options);

  if (args.count("json")) {
    nlohmann::json j;
    j["path"] = report.path;
    j["file_size"] = report.file_size;
    j["read_size"] = report.read_size;
    j["backend"] = report.backend;
    j["direct"] = report.direct;
    j["misaligned"] = report.misaligned;
    j["max_gb_per_s"] = report.max_gb_per_s;
    j["best_depth"] = report.best_depth;
    j["notices"] = report.notices;
    j["depths"] = nlohmann::json::array();
    for (const auto& d : report.depths) {
      j["depths"].push_back({{"depth", d.depth}, {"reads", d.reads}, {"bytes", d.bytes},
                             {"seconds", d.seconds}, {"gb_per_s", d.gb_per_s}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (const auto& n : report.notices) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::printf("%s: %s, %s reads, backend %s%s\n", report.path.c_str(), human_bytes(report.file_size).c_str(),
              human_bytes(report.read_size).c_str(), report.backend.c_str(),
              report.direct ? " (O_DIRECT)" : " (buffered)");
  if (report.misaligned) std::printf("destinations misaligned by 32 bytes: reads go through staging\n");
  std::printf("%6s %8s %10s %8s\n", "depth", "reads", "GB/s", "seconds");
  for (const auto& d : report.depths) {
    std::printf("%6u %8llu %10.3f %8.2f\n", d.depth, static_cast<unsigned long long>(d.reads), d.gb_per_s, d.seconds);
  }
  std::printf("raw bandwidth: %.3f GB/s (depth %u)\n", report.max_gb_per_s, report.best_depth);
  return 0;
}

}  // namespace sluice::tools
