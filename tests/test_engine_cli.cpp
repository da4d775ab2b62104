// `sluice run` inside a budget, as a user runs it: the output equals the in-core run, the cache
// reports its work, and the process's peak RSS stays under the budget plus a fixed overhead.
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "tests/test_support.h"

using sluice::test::run_sluice;

namespace {

// Code, libraries, thread stacks, io_uring rings and its 4 MiB staging area, the tokenizer and
// the GGUF directory: what a process needs beyond the model's own budgeted memory.
constexpr uint64_t kFixedOverhead = 64ull << 20;

std::string model() {
  return (sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf").string();
}

uint64_t number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(text, m, std::regex(pattern)), text);
  return std::stoull(m[1].str());
}

}  // namespace

TEST_CASE("sluice run inside a budget prints the in-core text and keeps peak RSS under budget plus overhead") {
  const std::string common = "run -m '" + model() + "' -p 'The quick brown fox' -n 24 -c 64 -b 32 --ignore-eos";
  auto in_core = run_sluice(common + " --in-core");
  REQUIRE_MESSAGE(in_core.exit_code == 0, in_core.err);
  const uint64_t budget = 5632ull << 10;  // 5.5 MiB: about 40% of the experts fit, so evictions must happen
  auto streamed = run_sluice(common + " --budget 5.5M --stats --io uring");
  REQUIRE_MESSAGE(streamed.exit_code == 0, streamed.err);
  CHECK(streamed.out == in_core.out);
  CHECK(streamed.err.find("expert cache") != std::string::npos);
  CHECK(number_after(streamed.err, R"(misses (\d+))") > 0);
  CHECK(number_after(streamed.err, R"((\d+) evictions)") > 0);
  uint64_t peak = number_after(streamed.err, R"(peak RSS (\d+) bytes)");
  MESSAGE("peak RSS " << peak << " bytes at a budget of " << budget << " bytes (+" << kFixedOverhead << " overhead)");
  if (!sluice::test::kUnderSanitizer) CHECK(peak <= budget + kFixedOverhead);
  auto pread = run_sluice(common + " --budget 5.5M --io pread");
  REQUIRE_MESSAGE(pread.exit_code == 0, pread.err);
  CHECK(pread.out == in_core.out);
}

TEST_CASE("sluice run below the resident size streams layers, lowers the batch, and keeps peak RSS under budget plus overhead") {
  const std::string common = "run -m '" + model() + "' -p 'The quick brown fox' -n 24 -c 64 --ignore-eos";
  // 2.5 MiB: the resident weights alone are 2.4 MiB, the experts another 24 MiB.
  const uint64_t budget = 2560ull << 10;
  auto streamed = run_sluice(common + " -b 32 --budget 2.5M --stats");
  REQUIRE_MESSAGE(streamed.exit_code == 0, streamed.err);
  CHECK(streamed.err.find("streamed layers") != std::string::npos);
  CHECK(number_after(streamed.err, R"((\d+) layer evictions)") > 0);
  CHECK(number_after(streamed.err, R"((\d+) evictions)") > 0);
  const uint64_t batch = number_after(streamed.err, R"(batch lowered from 32 to (\d+))");
  auto in_core = run_sluice(common + " -b " + std::to_string(batch) + " --in-core");
  REQUIRE_MESSAGE(in_core.exit_code == 0, in_core.err);
  CHECK(streamed.out == in_core.out);
  uint64_t peak = number_after(streamed.err, R"(peak RSS (\d+) bytes)");
  MESSAGE("peak RSS " << peak << " bytes at a budget of " << budget << " bytes (+" << kFixedOverhead << " overhead)");
  if (!sluice::test::kUnderSanitizer) CHECK(peak <= budget + kFixedOverhead);
}

TEST_CASE("sluice run refuses a budget below the minimum with one line naming the minimum") {
  auto r = run_sluice("run -m '" + model() + "' -p hello -n 4 -c 64 -b 32 --budget 1.5M");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("below the minimum") != std::string::npos);
  CHECK(r.err.find(" MiB (") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  auto bad = run_sluice("run -m '" + model() + "' -p hello --budget lots");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("--budget: cannot read 'lots'") != std::string::npos);
  auto both = run_sluice("run -m '" + model() + "' -p hello --budget 1G --cache-experts 10%");
  CHECK(both.exit_code == 1);
  CHECK(both.err.find("alternatives") != std::string::npos);
}

TEST_CASE("sluice run --cache-experts prints the budget it chose") {
  auto r = run_sluice("run -m '" + model() + "' -p hello -n 4 -c 64 -b 32 --cache-experts 25%");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("% of routed experts") != std::string::npos);
}

TEST_CASE("sluice bench -m reports the documented JSON fields for one run") {
  auto r = run_sluice("bench -m '" + model() + "' --cache-experts 50% -p 16 -n 12 -b 16 --probe-seconds 0.05 --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const char* field : {"budget_bytes", "model_bytes", "cache_experts_fraction", "routing_entropy",
                            "hottest_over_uniform", "temporal_reuse", "temporal_reuse_chance", "prefill_tok_s",
                            "decode_tok_s", "decode_first8_tok_s", "hit_rate", "read_bytes_per_token",
                            "disk_gbps_achieved", "disk_gbps_raw", "ceiling_tok_s", "achieved_over_ceiling",
                            "io_wait_share", "peak_rss_bytes"}) {
    CHECK_MESSAGE(r.out.find(std::string("\"") + field + "\"") != std::string::npos, field);
  }
  auto sweep = run_sluice("bench -m '" + model() + "' --cache-experts-sweep 25,100 -p 8 -n 10 -b 8 --probe-seconds 0.05 --json --plot '" +
                          (sluice::test::temp_dir("plot") / "p.svg").string() + "'");
  REQUIRE_MESSAGE(sweep.exit_code == 0, sweep.err);
  CHECK(sweep.out.find('[') < sweep.out.find('{'));
}

TEST_CASE("sluice bench runs a kimi-k3 model through the same expert cache and reports its routing") {
  const std::string k3 = (sluice::test::reference_dir() / "kimi-k3/kimi-k3-q8_0.gguf").string();
  auto r = run_sluice("bench -m '" + k3 + "' --cache-experts 50% -p 8 -n 12 -b 8 --probe-seconds 0.05 --json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("\"hit_rate\"") != std::string::npos);
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(r.out, m, std::regex(R"("routing_entropy":\s*([0-9.]+))")), r.out);
  CHECK(std::stod(m[1].str()) > 0);
  REQUIRE(std::regex_search(r.out, m, std::regex(R"("cache_experts_fraction":\s*([0-9.]+))")));
  CHECK(std::stod(m[1].str()) > 0.4);
}
