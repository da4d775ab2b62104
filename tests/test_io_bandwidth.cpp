// The bandwidth probe behind `sluice bench io`: one result per depth, the maximum reported, and
// the CLI's table and JSON.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/bandwidth_probe.h"
#include "tests/io_test_files.h"

using namespace sluice;

namespace {

std::filesystem::path make_file(const test::ScopedDir& dir, uint64_t size) {
  auto path = dir.path / "bench.bin";
  test::write_file(path, test::pattern_bytes(size, 1));
  return path;
}

std::filesystem::path disk_or_temp(const std::string& name) {
  auto dir = test::disk_dir(name);
  return dir.empty() ? test::temp_dir(name) : dir;
}

}  // namespace

TEST_CASE("the bandwidth probe measures every depth and reports the best") {
  test::ScopedDir dir(disk_or_temp("bw"));
  auto path = make_file(dir, 16u << 20);
  io::BandwidthOptions o;
  o.read_size = 1u << 20;
  o.depths = {1, 4, 16};
  o.seconds_per_depth = 0.05;
  io::BandwidthReport r = io::probe_bandwidth(path.string(), o);
  REQUIRE(r.depths.size() == 3);
  CHECK(r.read_size == (1u << 20));
  CHECK(r.backend == "uring");
  double best = 0;
  for (const auto& d : r.depths) {
    CHECK(d.reads > 0);
    CHECK(d.bytes == d.reads * r.read_size);
    CHECK(d.gb_per_s > 0);
    best = std::max(best, d.gb_per_s);
  }
  CHECK(r.max_gb_per_s == best);
  CHECK(r.best_depth != 0);
}

TEST_CASE("the bandwidth probe can land reads misaligned, through the staging area") {
  test::ScopedDir dir(disk_or_temp("bw-misaligned"));
  auto path = make_file(dir, 8u << 20);
  io::BandwidthOptions o;
  o.read_size = 1u << 20;
  o.depths = {2};
  o.seconds_per_depth = 0.05;
  o.misaligned = true;
  io::BandwidthReport r = io::probe_bandwidth(path.string(), o);
  CHECK(r.misaligned);
  REQUIRE(r.depths.size() == 1);
  CHECK(r.depths[0].reads > 0);
}

TEST_CASE("the bandwidth probe clamps the read size to the file and rejects an empty file") {
  test::ScopedDir dir(disk_or_temp("bw-small"));
  auto path = make_file(dir, 100000);
  io::BandwidthOptions o;
  o.depths = {2};
  o.seconds_per_depth = 0.02;
  io::BandwidthReport r = io::probe_bandwidth(path.string(), o);
  CHECK(r.read_size == 98304);  // 100000 rounded down to 4 KiB
  auto empty = dir.path / "empty.bin";
  test::write_file(empty, {});
  try {
    io::probe_bandwidth(empty.string(), o);
    FAIL("an empty file was measured");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("too small") != std::string::npos);
  }
}

TEST_CASE("sluice bench io prints a table or JSON and rejects a bad read size") {
  test::ScopedDir dir(disk_or_temp("bw-cli"));
  auto path = make_file(dir, 8u << 20);
  auto r = test::run_sluice("bench io -m '" + path.string() + "' --read-size 1M --depths 1,2 --seconds 0.05");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("raw bandwidth") != std::string::npos);
  CHECK(r.out.find("GB/s") != std::string::npos);

  r = test::run_sluice("bench io -m '" + path.string() + "' --read-size 512K --depths 1,4 --seconds 0.05 --json");
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["read_size"] == 512 * 1024);
  CHECK(j["depths"].size() == 2);
  CHECK(j["max_gb_per_s"].get<double>() > 0);

  r = test::run_sluice("bench io -m '" + path.string() + "' --read-size lots");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--read-size") != std::string::npos);

  r = test::run_sluice("bench io -m '" + (dir.path / "missing.gguf").string() + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("missing.gguf") != std::string::npos);
}
