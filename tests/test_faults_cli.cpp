// `sluice run --io-faults SPEC` as a user (or CI) runs it on an indexed model: transient faults
// leave the output bit-identical to a clean run, persistent ones end in one line naming the
// tensor, the expert and the offset, and every injected bit flip is caught by the checksums.
// The last case runs the flip scenario with --verify off and shows that the detection test's
// assertions would fail there: corrupted bytes reach the kernels and the logits change.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <filesystem>
#include <regex>
#include <string>

#include "core/gguf/gguf.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::test::run_sluice;

namespace {

// A copy of a tiny reference model with its shard index beside it (built once per process).
const fs::path& indexed_model() {
  static const fs::path path = [] {
    fs::path dir = sluice::test::temp_dir("faults_cli");
    fs::path dst = dir / "deepseek2-q4_k_m.gguf";
    fs::copy_file(sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf", dst);
    fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write);
    auto r = run_sluice("index '" + dst.string() + "'");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return dst;
  }();
  return path;
}

// 5.5 MiB: about 40% of the experts fit, so shards are evicted and read again during the run.
std::string run_args(const std::string& logits) {
  return "run -m '" + indexed_model().string() +
         "' -p 'The quick brown fox' -n 16 -c 64 -b 32 --ignore-eos --budget 5.5M --logits-out '" + logits + "'";
}

uint64_t count_of(const std::string& err, const std::string& what) {
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(err, m, std::regex(what + " (\\d+)")), err);
  return std::stoull(m[1].str());
}

struct CleanRun {
  std::string out;
  std::vector<uint8_t> logits;
};

const CleanRun& clean_run() {
  static const CleanRun clean = [] {
    fs::path logits = sluice::test::temp_dir("faults_cli_clean") / "logits.f32";
    auto r = run_sluice(run_args(logits.string()));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    REQUIRE(r.err.find("shards verified against the index") != std::string::npos);
    REQUIRE(r.out.starts_with("The quick brown fox"));  // run -p prints the prompt first
    sluice::test::require_text(r.out.substr(19), "the clean run's continuation");
    return CleanRun{r.out, sluice::test::read_file(logits)};
  }();
  return clean;
}

}  // namespace

TEST_CASE("sluice run with transient IO faults prints the same text and logits as a clean run") {
  const CleanRun& clean = clean_run();
  for (const char* io : {"uring", "pread"}) {
    CAPTURE(io);
    fs::path logits = sluice::test::temp_dir("faults_cli_transient") / "logits.f32";
    auto r = run_sluice(run_args(logits.string()) + " --io " + io +
                        " --io-faults seed=11,short=0.2,eagain=0.2,delay=0.3,eio=0.05");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out == clean.out);
    CHECK(sluice::test::read_file(logits) == clean.logits);
    CHECK(count_of(r.err, "short reads") > 0);
    CHECK(count_of(r.err, "EAGAIN") > 0);
    CHECK(count_of(r.err, "delayed") > 0);
    const uint64_t eio = count_of(r.err, "transient EIO");
    CHECK(eio > 0);
    // Each failed shard was read once more (a shard can lose more than one extent at once).
    const uint64_t rereads = count_of(r.err, "shards re-read");
    CHECK(rereads >= 1);
    CHECK(rereads <= eio);
  }
}

TEST_CASE("sluice run falls back to pread when io_uring setup fails and prints the same logits") {
  const CleanRun& clean = clean_run();
  fs::path logits = sluice::test::temp_dir("faults_cli_uring_fail") / "logits.f32";
  auto r = run_sluice(run_args(logits.string()) + " --io auto --io-faults uring_fail=1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("io_uring setup failed") != std::string::npos);
  CHECK(r.err.find("(io pread") != std::string::npos);
  CHECK(r.out == clean.out);
  CHECK(sluice::test::read_file(logits) == clean.logits);
}

TEST_CASE("sluice run with a persistent read error fails with one line naming tensor, expert and offset") {
  fs::path logits = sluice::test::temp_dir("faults_cli_persistent") / "logits.f32";
  auto r = run_sluice(run_args(logits.string()) + " --io pread --io-faults seed=5,eio_always=1");
  CHECK(r.exit_code == 1);
  // The load lines come first; the failure is the one error line, and the last.
  const size_t at = r.err.find("sluice run: error: ");
  REQUIRE_MESSAGE(at != std::string::npos, r.err);
  const std::string line = r.err.substr(at);
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  CHECK(line.find("tensor 'blk.") != std::string::npos);
  CHECK(line.find(" expert ") != std::string::npos);
  CHECK(line.find("slice at offset ") != std::string::npos);
  CHECK(line.find("Input/output error") != std::string::npos);
  CHECK(line.find("failed again after one re-read") != std::string::npos);
}

TEST_CASE("sluice run detects every injected bit flip and still prints the clean logits") {
  const CleanRun& clean = clean_run();
  fs::path logits = sluice::test::temp_dir("faults_cli_flips") / "logits.f32";
  auto r = run_sluice(run_args(logits.string()) + " --io pread --io-faults seed=3,flip_once=0.2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const uint64_t injected = count_of(r.err, "bit flips");
  const uint64_t detected = count_of(r.err, "corrupt extents detected");
  MESSAGE("bit flips injected " << injected << ", detected " << detected);
  CHECK(injected > 0);
  CHECK(detected == injected);
  CHECK(r.out == clean.out);
  CHECK(sluice::test::read_file(logits) == clean.logits);
}

TEST_CASE("with --verify off the same bit flips go undetected and change the logits") {
  // The proof that the detection test can fail: the same scenario without checksums breaks
  // both of its assertions (detected == injected, logits == clean).
  const CleanRun& clean = clean_run();
  fs::path logits = sluice::test::temp_dir("faults_cli_flips_off") / "logits.f32";
  auto r = run_sluice(run_args(logits.string()) + " --io pread --verify off --io-faults seed=3,flip_once=0.2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("shards verified") == std::string::npos);
  const uint64_t injected = count_of(r.err, "bit flips");
  CHECK(injected > 0);
  CHECK(count_of(r.err, "corrupt extents detected") != injected);
  CHECK(sluice::test::read_file(logits) != clean.logits);
}

TEST_CASE("sluice run rejects a malformed --io-faults spec with one line") {
  auto r = run_sluice("run -m '" + indexed_model().string() + "' -p hi -n 1 --io-faults flip=2");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("--io-faults") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

namespace {

// Copies a reference model, indexes the copy, then flips one bit in the middle of `tensor`,
// keeping size, mtime and header: the index still looks current, so only the landing check of the
// resident tensor can notice. `sluice run` must stop with one line naming the tensor, and run
// with --verify off (the same corruption, unchecked) must not.
void check_resident_flip_is_refused(const std::string& stem, const std::string& tensor, const std::string& extra) {
  CAPTURE(stem);
  CAPTURE(tensor);
  fs::path dir = sluice::test::temp_dir("faults_cli_resident");
  fs::path model = dir / "m.gguf";
  fs::copy_file(sluice::test::reference_dir() / (stem + ".gguf"), model);
  fs::permissions(model, fs::perms::owner_read | fs::perms::owner_write);
  auto indexed = run_sluice("index '" + model.string() + "'");
  REQUIRE_MESSAGE(indexed.exit_code == 0, indexed.err);
  struct stat st{};
  REQUIRE(::stat(model.c_str(), &st) == 0);
  uint64_t offset = 0;
  {
    sluice::io::PreadReader reader(model.string());
    auto file = sluice::core::GgufFile::parse(reader);
    const auto& t = file.tensor(tensor);
    offset = t.file_offset + t.n_bytes / 2;
  }
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x04);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
  }
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, model.c_str(), times, 0) == 0);
  const std::string args = "run -m '" + model.string() + "' -p hi -n 2 -c 64 -b 32 " + extra;
  auto r = run_sluice(args);
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("tensor '" + tensor + "'") != std::string::npos, r.err);
  CHECK(r.err.find("after one re-read") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  auto unchecked = run_sluice(args + " --verify off");  // the corruption is what stopped it
  CHECK_MESSAGE(unchecked.exit_code == 0, unchecked.err);
}

}  // namespace

TEST_CASE("sluice run refuses a resident tensor whose bytes no longer match the index") {
  check_resident_flip_is_refused("tiny/deepseek2/deepseek2-q4_k_m", "blk.0.attn_norm.weight", "--budget 7M");
}

TEST_CASE("sluice run refuses a kimi-k3 resident tensor whose bytes no longer match the index, stored or converted") {
  // A quantized projection and an F32 norm, both read as stored.
  for (const char* tensor : {"blk.0.attn_q.weight", "blk.0.attn_norm.weight"})
    check_resident_flip_is_refused("kimi-k3/kimi-k3-q4_k_m", tensor, "");
  // With --widen-f16 an F16 projection is converted at load: the check sees the file's bytes first.
  check_resident_flip_is_refused("kimi-k3/kimi-k3-f16", "blk.0.attn_q.weight", "--widen-f16");
}
