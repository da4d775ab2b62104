// sluice doctor: its --json fields (documented in tools/cmd_doctor.cpp and README), the budget
// recommendation's arithmetic, and a cgroup limit below --budget reported as a failure.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/doctor.h"
#include "core/gguf/model_summary.h"
#include "tests/test_support.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

bool cpu_has(const std::string& flag) {
  const std::string info = test::read_text("/proc/cpuinfo");
  return info.find(" " + flag + " ") != std::string::npos || info.find(" " + flag + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("sluice doctor --json reports every check, the kernel level and a recommendation for a model") {
  const fs::path model = test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf";
  REQUIRE(fs::exists(model));
  const auto r = test::run_sluice("doctor --json --probe-seconds 0.3 -m " + model.string());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("ok").get<bool>());
  std::vector<std::string> names;
  for (const auto& c : j.at("checks")) {
    names.push_back(c.at("name").get<std::string>());
    const std::string status = c.at("status").get<std::string>();
    CHECK((status == "ok" || status == "warn" || status == "fail"));
    CHECK(!c.at("detail").get<std::string>().empty());
  }
  CHECK(names == std::vector<std::string>{"io_uring", "o_direct", "memlock", "cgroup", "cpu", "disk"});
  const std::string level = j.at("kernel_level").get<std::string>();
  const bool avx2 = cpu_has("avx2") && cpu_has("fma");
  const bool avx512 = avx2 && cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl") &&
                      cpu_has("avx512dq") && cpu_has("avx512_vnni");
  CHECK(level == (avx512 ? "avx512_vnni" : avx2 ? "avx2" : "scalar"));
  const auto& rec = j.at("recommendation");
  // A 6 MB file fits in any machine that runs this suite.
  CHECK(rec.at("in_core").get<bool>());
  CHECK(rec.at("budget_bytes").get<uint64_t>() == fs::file_size(model));
  CHECK(rec.at("disk_gbps").get<double>() > 0);
  CHECK(rec.at("usable_bytes").get<uint64_t>() > 0);
}

TEST_CASE("doctor recommends the usable memory as budget and the share of routed experts it leaves") {
  core::ModelSummary m;
  m.file_bytes = 10'000;
  m.resident_bytes = 2'000;
  m.routed_expert_bytes = 8'000;
  m.routed_bytes_per_token = 400;
  const core::DoctorRecommendation fits = core::recommend(m, 10'000);
  CHECK(fits.in_core);
  CHECK(fits.budget_bytes == 10'000);
  core::DoctorRecommendation part = core::recommend(m, 4'000);
  CHECK_FALSE(part.in_core);
  CHECK(part.budget_bytes == 4'000);
  CHECK(part.cache_experts == doctest::Approx(0.25));
  core::expect_decode(m, 1.0, part);
  // ceiling = 1e9 / ((1 - hit) x 400): hit 0.25 at the low end, 0.375 (1.5x) at the high end.
  CHECK(part.tok_s_low == doctest::Approx(1e9 / (0.75 * 400)));
  CHECK(part.tok_s_high == doctest::Approx(1e9 / (0.625 * 400)));
  CHECK(core::recommend(m, 1'000).cache_experts == 0.0);  // not even the resident part fits
}

TEST_CASE("sluice doctor fails the cgroup check when the cgroup's limit is below --budget") {
  // A child memory cgroup of 512 MiB (v1 or v2), the doctor run moved into it by a shell. The limit
  // leaves room for an ASan+UBSan binary's start-up (its shadow and allocator pages: 64 MiB was
  // OOM-killed there) and stays below --budget 1G, which is what the check is about.
  const bool v1 = fs::exists("/sys/fs/cgroup/memory/cgroup.procs");
  const fs::path root = v1 ? fs::path("/sys/fs/cgroup/memory") : fs::path("/sys/fs/cgroup");
  const fs::path dir = root / ("sluice-doctor-" + std::to_string(getpid()));
  REQUIRE_MESSAGE(geteuid() == 0, "this test needs root to create a memory cgroup");
  fs::create_directory(dir);
  {
    std::ofstream limit(dir / (v1 ? "memory.limit_in_bytes" : "memory.max"));
    limit << (512 << 20);
  }
  const auto r = test::run_command("sh -c 'echo $$ > " + (dir / "cgroup.procs").string() + " && exec " +
                                   test::sluice_binary() + " doctor --json --budget 1G'");
  fs::remove(dir);
  INFO(r.err);
  INFO("exit code " << r.exit_code << (r.exit_code == 137 ? " (killed: the cgroup's limit is too small for this binary)" : ""));
  REQUIRE(r.exit_code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK_FALSE(j.at("ok").get<bool>());
  bool seen = false;
  for (const auto& c : j.at("checks")) {
    if (c.at("name") != "cgroup") continue;
    seen = true;
    CHECK(c.at("status") == "fail");
    CHECK(c.at("detail").get<std::string>().find("below --budget 1.0 GiB") != std::string::npos);
  }
  CHECK(seen);
  CHECK_FALSE(j.contains("recommendation"));
}
