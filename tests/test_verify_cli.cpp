// --verify as a user meets it: verification never switches itself off without a word.
//   - a model changed after `sluice index` (one byte rewritten, so its mtime moves) stops run and
//     bench with one line naming the index and the two ways out, before any token is computed;
//   - a byte flipped while the mtime is put back (the index still looks current) is caught where
//     the expert lands, and the run fails naming the tensor and the expert;
//   - no index: one notice line; --verify require refuses; --verify off runs and says nothing.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/gguf/gguf.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::test::run_sluice;

namespace {

constexpr const char* kExpertTensor = "blk.1.ffn_up_exps.weight";

// A fresh copy of a tiny reference model (16 experts per MoE layer), dated in the past so that
// any later write surely moves its mtime.
fs::path copy_model(const std::string& name) {
  const fs::path dst = sluice::test::temp_dir(name) / "deepseek2-q4_k_m.gguf";
  fs::copy_file(sluice::test::reference_dir() / "tiny/deepseek2/deepseek2-q4_k_m.gguf", dst);
  fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write);
  const struct timespec past[2] = {{1000000000, 0}, {1000000000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, dst.c_str(), past, 0) == 0);
  return dst;
}

void index_model(const fs::path& model) {
  auto r = run_sluice("index '" + model.string() + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
}

// Flips one bit in the middle of each expert's slice of kExpertTensor (every expert, so whichever
// the router picks is corrupt); returns how many bytes changed.
int flip_every_expert(const fs::path& model) {
  uint64_t offset = 0, slice = 0;
  int64_t n_expert = 0;
  {
    sluice::io::PreadReader reader(model.string());
    auto file = sluice::core::GgufFile::parse(reader);
    const auto& t = file.tensor(kExpertTensor);
    n_expert = t.ne[2];
    slice = t.n_bytes / static_cast<uint64_t>(n_expert);
    offset = t.file_offset;
  }
  std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
  for (int64_t e = 0; e < n_expert; ++e) {
    const auto at = static_cast<std::streamoff>(offset + static_cast<uint64_t>(e) * slice + slice / 2);
    char c = 0;
    f.seekg(at);
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(at);
    f.write(&c, 1);
  }
  REQUIRE(f.good());
  return static_cast<int>(n_expert);
}

// Prompt as token ids: stdout then holds generated tokens only (no echo of the prompt), so an
// empty stdout means no token was computed.
std::string run_args(const fs::path& model) {
  return "run -m '" + model.string() + "' --tokens 1,2,3,4,5,6,7,8 -n 4 -c 64 -b 32 --ignore-eos";
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("a model changed after sluice index stops run and bench with one line, before any token") {
  const fs::path model = copy_model("verify_stale");
  index_model(model);
  flip_every_expert(model);  // an ordinary write: the mtime moves, the index is stale
  for (const std::string extra : {"", " --cache-experts 50%", " --in-core", " --verify require"}) {
    CAPTURE(extra);
    auto r = run_sluice(run_args(model) + extra);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());  // not one token computed on the changed bytes
    CHECK(lines(r.err) == 1);
    CHECK_MESSAGE(r.err.find("shard index '" + model.string() + ".sluice-index' does not match '" + model.string() +
                             "'") != std::string::npos,
                  r.err);
    CHECK(r.err.find("mtime changed") != std::string::npos);
    CHECK(r.err.find("re-run `sluice index '" + model.string() + "'`") != std::string::npos);
    CHECK(r.err.find("--verify off") != std::string::npos);
  }
  auto bench = run_sluice("bench -m '" + model.string() + "' -p 4 -n 9 --probe-seconds 0 --json");
  CHECK(bench.exit_code == 1);
  CHECK(bench.out.empty());
  CHECK_MESSAGE(bench.err.find("does not match") != std::string::npos, bench.err);
  // The way out the message names: re-indexing makes the (changed) file the reference again.
  index_model(model);
  auto again = run_sluice(run_args(model));
  CHECK_MESSAGE(again.exit_code == 0, again.err);
  CHECK(again.err.find("shards verified against the index") != std::string::npos);
}

TEST_CASE("a flipped expert byte under an index that still looks current fails the run naming tensor and expert") {
  // The mtime is put back after the write (touch -r): size, mtime and header match the index,
  // so only the checksum where the shard lands can notice.
  const fs::path model = copy_model("verify_landing");
  index_model(model);
  struct stat st {};
  REQUIRE(::stat(model.c_str(), &st) == 0);
  flip_every_expert(model);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, model.c_str(), times, 0) == 0);

  auto streamed = run_sluice(run_args(model) + " --cache-experts 50%");
  CHECK(streamed.exit_code == 1);
  CHECK(streamed.out.empty());
  const size_t at = streamed.err.find("sluice run: error: ");
  REQUIRE_MESSAGE(at != std::string::npos, streamed.err);
  const std::string line = streamed.err.substr(at);
  CHECK(lines(line) == 1);
  CHECK(line.find(std::string("tensor '") + kExpertTensor + "'") != std::string::npos);
  CHECK(line.find(" expert ") != std::string::npos);
  CHECK(line.find("the index says") != std::string::npos);
  CHECK(line.find("failed again after one re-read") != std::string::npos);

  // In core the whole tensor is checked as it loads.
  auto in_core = run_sluice(run_args(model) + " --in-core");
  CHECK(in_core.exit_code == 1);
  CHECK(in_core.out.empty());
  CHECK_MESSAGE(in_core.err.find(std::string("tensor '") + kExpertTensor + "'") != std::string::npos, in_core.err);
  CHECK(in_core.err.find("differs from the index") != std::string::npos);
  // The same with the weights used in place in a mapping of the file.
  auto mapped = run_sluice(run_args(model) + " --in-core --mmap");
  CHECK(mapped.exit_code == 1);
  CHECK_MESSAGE(mapped.err.find(std::string("tensor '") + kExpertTensor + "'") != std::string::npos, mapped.err);
  CHECK(mapped.err.find("differs from the index") != std::string::npos);

  // What stopped both runs is the checksum: unchecked, the same file runs.
  auto unchecked = run_sluice(run_args(model) + " --cache-experts 50% --verify off");
  CHECK_MESSAGE(unchecked.exit_code == 0, unchecked.err);
  CHECK_FALSE(unchecked.out.empty());
}

TEST_CASE("without an index run says in one line that shards are not verified, require refuses and off is silent") {
  const fs::path model = copy_model("verify_missing");
  auto on = run_sluice(run_args(model));
  REQUIRE_MESSAGE(on.exit_code == 0, on.err);
  sluice::test::require_text(on.out, "the run's text");
  const std::string notice = "sluice run: shards are not verified: '" + model.string() + "' has no shard index (run `sluice index '" +
                             model.string() + "'`";
  CHECK_MESSAGE(on.err.find(notice) != std::string::npos, on.err);
  size_t notices = 0;
  for (size_t p = on.err.find("shards are not verified"); p != std::string::npos;
       p = on.err.find("shards are not verified", p + 1))
    ++notices;
  CHECK(notices == 1);
  CHECK(on.err.find("shards verified against the index") == std::string::npos);

  auto bench = run_sluice("bench -m '" + model.string() + "' -p 4 -n 9 --probe-seconds 0 --json");
  REQUIRE_MESSAGE(bench.exit_code == 0, bench.err);
  CHECK(bench.err.find("sluice bench: shards are not verified") != std::string::npos);

  auto require = run_sluice(run_args(model) + " --verify require");
  CHECK(require.exit_code == 1);
  CHECK(require.out.empty());
  CHECK(lines(require.err) == 1);
  CHECK_MESSAGE(require.err.find("--verify require: '" + model.string() + "' has no shard index") != std::string::npos,
                require.err);

  auto off = run_sluice(run_args(model) + " --verify off");
  REQUIRE_MESSAGE(off.exit_code == 0, off.err);
  CHECK(off.err.find("not verified") == std::string::npos);
  CHECK(off.out == on.out);

  auto bad = run_sluice(run_args(model) + " --verify maybe");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("--verify 'maybe' must be on, off or require") != std::string::npos);

  index_model(model);
  auto required = run_sluice(run_args(model) + " --verify require");
  CHECK_MESSAGE(required.exit_code == 0, required.err);
  CHECK(required.err.find("shards verified against the index") != std::string::npos);
  CHECK(required.out == on.out);
}
