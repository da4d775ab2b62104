// Saved fuzz findings replay in every test run, not only under scripts/fuzz: each file in
// tests/fuzz/regressions goes through the fuzz target's own entry (tests/fuzz/gguf_fuzz_entry.h,
// production limits) and must be rejected or accepted cleanly, within the fuzzer's own bounds
// (scripts/fuzz: -timeout=10, -rss_limit_mb=2048).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <vector>

#include "common/error.h"
#include "app/bench.h"
#include "core/gguf/gguf.h"
#include "io/pread_reader.h"
#include "tests/fuzz/gguf_fuzz_entry.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

TEST_CASE("every saved fuzz input in tests/fuzz/regressions passes through the fuzz target within its limits") {
  const fs::path dir = sluice::test::source_dir() / "tests" / "fuzz" / "regressions";
  REQUIRE_MESSAGE(fs::is_directory(dir), dir.string() << " is missing");
  std::vector<fs::path> inputs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) inputs.push_back(entry.path());
  }
  std::sort(inputs.begin(), inputs.end());
  REQUIRE_MESSAGE(inputs.size() >= 3, "expected the saved inputs in " << dir.string());
  for (const fs::path& input : inputs) {
    CAPTURE(input.filename().string());
    const std::vector<uint8_t> bytes = sluice::test::read_file(input);
    // libFuzzer's -timeout=10 in scripts/fuzz; wall time, so the best of up to three runs (a run
    // slowed by other jobs on a busy machine does not fail the case, a hang still does).
    double seconds = std::numeric_limits<double>::infinity();
    for (int attempt = 0; attempt < 3 && !(seconds < 10.0); ++attempt) {
      const auto start = std::chrono::steady_clock::now();
      CHECK_NOTHROW(sluice::fuzz::gguf_one_input(bytes.data(), bytes.size()));
      seconds = std::min(seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    MESSAGE(input.filename().string() << ": " << bytes.size() << " bytes, " << seconds << " s");
    CHECK(seconds < 10.0);
  }
  // libFuzzer's -rss_limit_mb=2048: the process's high-water mark after all of them (plain
  // builds only: sanitizer shadow memory is not the target's).
  const uint64_t peak = sluice::core::peak_rss_bytes();
  MESSAGE("peak RSS " << peak << " bytes");
  if (!sluice::test::kUnderSanitizer) CHECK(peak < (2048ull << 20));
}

TEST_CASE("one metadata array is refused above 64 MiB of memory, at the count field, before it is read") {
  // The two inputs that production limits alone let through (a count field in a sparse file
  // claiming the whole 2 GiB header): refused up front by GgufLimits::max_array_bytes.
  const fs::path dir = sluice::test::source_dir() / "tests" / "fuzz" / "regressions";
  for (const char* name : {"oom-empty-string-array", "oom-huge-u8-array"}) {
    CAPTURE(name);
    const std::vector<uint8_t> bytes = sluice::test::read_file(dir / name);
    const fs::path sparse = sluice::test::temp_dir("fuzz_array") / "sparse.gguf";
    sluice::test::write_file(sparse, bytes);
    fs::resize_file(sparse, 4ull << 30);  // the zeros the fuzz target serves after the input
    sluice::io::PreadReader reader(sparse.string());
    try {
      sluice::core::GgufFile::parse(reader);
      FAIL("parsed");
    } catch (const sluice::Error& e) {
      CHECK(e.code() == sluice::ErrorCode::invalid_file);
      CHECK_MESSAGE(std::string(e.what()).find("above the limit of 67108864 bytes for one array") != std::string::npos,
                    e.what());
      CHECK(std::string(e.what()).find("general.architecture") != std::string::npos);
    }
  }
}
