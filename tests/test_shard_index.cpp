#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "cache/shard_layout.h"
#include "core/gguf/shard_index.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::core::GgufFile;
using sluice::core::ShardIndex;

namespace {

fs::path copy_model(const fs::path& dir, const char* rel) {
  fs::path dst = dir / fs::path(rel).filename();
  fs::copy_file(sluice::test::reference_dir() / rel, dst);
  fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write);
  return dst;
}

}  // namespace

TEST_CASE("the shard index has one digest per expert slice and per resident tensor") {
  auto dir = sluice::test::temp_dir("index");
  auto model = copy_model(dir, "tiny/deepseek2/deepseek2-q4_k_m.gguf");
  sluice::io::PreadReader reader(model.string());
  GgufFile file = GgufFile::parse(reader);
  ShardIndex index = ShardIndex::build(file, reader);
  const auto* up = index.find("blk.1.ffn_up_exps.weight");
  REQUIRE(up != nullptr);
  CHECK(up->n_parts == 16);
  CHECK(up->digests.size() == 16);
  const auto* q = index.find("blk.0.attn_q_b.weight");
  REQUIRE(q != nullptr);
  CHECK(q->n_parts == 1);
  // 2 MoE layers x 3 tensors x 16 experts, plus one extent for each of the other 46 tensors.
  CHECK(index.extent_count() == 2 * 3 * 16 + (52 - 6));

  // Each digest is the XXH3-64 of exactly that slice of the file.
  const auto& t = file.tensor("blk.2.ffn_down_exps.weight");
  uint64_t part = t.n_bytes / 16;
  std::vector<std::byte> bytes(part);
  reader.read_sync(t.file_offset + 5 * part, bytes);
  CHECK(index.verify(t.name, 5, bytes));
  bytes[17] ^= std::byte{0x10};
  CHECK_FALSE(index.verify(t.name, 5, bytes));
  CHECK_FALSE(index.verify(t.name, 6, bytes));
}

TEST_CASE("a saved index is reloaded while the model is unchanged and rejected once it changes") {
  auto dir = sluice::test::temp_dir("index");
  auto model = copy_model(dir, "tiny/qwen3moe/qwen3moe-q4_k_m.gguf");
  {
    sluice::io::PreadReader reader(model.string());
    GgufFile file = GgufFile::parse(reader);
    auto where = ShardIndex::build(file, reader).save(model);
    CHECK(where == ShardIndex::sidecar_path(model));
    auto loaded = ShardIndex::load(model, file, reader);
    REQUIRE(loaded.has_value());
    CHECK(loaded->extent_count() == ShardIndex::build(file, reader).extent_count());
  }
  // Rewrite one byte of tensor data in place: same size, new mtime -> stale.
  {
    sluice::io::PreadReader reader(model.string());
    GgufFile file = GgufFile::parse(reader);
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(file.data_offset() + 100));
    f.put('\x7f');
  }
  sluice::io::PreadReader reader(model.string());
  GgufFile file = GgufFile::parse(reader);
  // The write may land within the file system's timestamp granularity; set an mtime that surely
  // differs from the recorded one, as any later edit of the file would.
  struct timespec old_times[2] = {{1, 0}, {1, 0}};
  ::utimensat(AT_FDCWD, model.c_str(), old_times, 0);
  CHECK_FALSE(ShardIndex::load(model, file, reader).has_value());
}

TEST_CASE("sluice index writes to the cache directory when the model's folder is read-only") {
  auto dir = sluice::test::temp_dir("index");
  auto ro = dir / "ro";
  fs::create_directories(ro);
  auto model = copy_model(ro, "tiny/llama-moe/llama-moe-q4_k_m.gguf");
  auto cache = dir / "cache";
  // Block the sidecar location with a directory of the same name: no user, root included, can
  // create a file there, so the index must go to the cache directory.
  fs::create_directories(ShardIndex::sidecar_path(model).string() + ".tmp");
  fs::create_directories(ShardIndex::sidecar_path(model));
  auto r = sluice::test::run_sluice("index '" + model.string() + "'", "XDG_CACHE_HOME='" + cache.string() + "'");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find(cache.string()) != std::string::npos);
  auto again = sluice::test::run_sluice("index '" + model.string() + "'", "XDG_CACHE_HOME='" + cache.string() + "'");
  CHECK(again.out.find("up to date") != std::string::npos);
}

TEST_CASE("sluice index rejects a missing model with one line") {
  auto r = sluice::test::run_sluice("index /nonexistent/m.gguf");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("cannot open '/nonexistent/m.gguf'") != std::string::npos);
}

TEST_CASE("verifying a landed extent costs one XXH3-64 pass, measured in CPU time per GB") {
  // The figure the README quotes for --verify on: CPU time (not wall time, so a busy machine
  // does not inflate it) to hash 1 GiB through the digest the cache checks on landing.
  std::vector<std::byte> buf(64u << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  const uint64_t first = sluice::cache::extent_digest(buf);
  auto cpu_now = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  };
  const int passes = 16;  // 1 GiB in all
  uint64_t same = 0;
  const double t0 = cpu_now();
  for (int p = 0; p < passes; ++p) same += sluice::cache::extent_digest(buf) == first ? 1 : 0;
  const double cpu_s = cpu_now() - t0;
  const double gb = static_cast<double>(buf.size()) * passes / 1e9;
  MESSAGE("XXH3-64 verification: " << cpu_s / gb * 1e3 << " ms of CPU per GB (" << gb / cpu_s
                                   << " GB/s on one core), " << gb << " GB hashed");
  CHECK(same == passes);
  buf[12345] ^= std::byte{0x10};  // one flipped bit changes the digest
  CHECK(sluice::cache::extent_digest(buf) != first);
}
