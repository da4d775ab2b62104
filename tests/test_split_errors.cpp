// Malformed split sets, built in a temp dir from copies of the reference parts
// (../shared/reference/tiny/deepseek2/split), are refused with one clear line naming the part:
// a missing part, a duplicate part, a wrong split.count, a part of another model (tensor total or
// architecture), a truncated part, and a lone part renamed so its siblings cannot be found.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"
#include "io/pread_reader.h"
#include "tests/model_reference.h"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

const char* const kParts[] = {"deepseek2-q4_k_m-00001-of-00003.gguf", "deepseek2-q4_k_m-00002-of-00003.gguf",
                              "deepseek2-q4_k_m-00003-of-00003.gguf"};

// A fresh copy of the 3-part set; returns the part paths.
std::vector<fs::path> copy_set(const std::string& name) {
  const auto dir = temp_dir("split-bad-" + name);
  std::vector<fs::path> parts;
  for (const char* p : kParts) {
    parts.push_back(dir / p);
    fs::copy_file(tiny_dir("deepseek2") / "split" / p, parts.back());
    fs::permissions(parts.back(), fs::perms::owner_write, fs::perm_options::add);
  }
  return parts;
}

// One part parsed on its own (no set handling), to find where its keys are.
core::GgufFile parse_alone(const fs::path& path, io::PreadReader& reader) {
  return core::GgufFile::parse_one(reader, 0, reader.file_size(), path.string());
}
io::PreadOptions alone() {
  io::PreadOptions o;
  o.whole_split_set = false;
  return o;
}

// Overwrites the value bytes of metadata key `key` in a part.
void patch_value(const fs::path& path, const std::string& key, const void* value, size_t n) {
  uint64_t at = 0;
  {
    io::PreadReader reader(path.string(), alone());
    const core::GgufFile f = parse_alone(path, reader);
    for (const auto& kv : f.metadata())
      if (kv.key == key) at = kv.file_offset + 8 + key.size() + 4;
  }
  REQUIRE(at > 0);
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(at));
  io.write(static_cast<const char*>(value), static_cast<std::streamsize>(n));
  REQUIRE(io.good());
}

// The set is refused, by the library and by `sluice inspect` / `sluice run`, with one line that
// contains every one of `expected`.
void expect_refused(const fs::path& opened_as, const std::vector<std::string>& expected) {
  CAPTURE(opened_as.string());
  try {
    io::PreadReader reader(opened_as.string());
    core::GgufFile::parse(reader);
    FAIL("a malformed set was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    for (const auto& s : expected) CHECK_MESSAGE(std::string(e.what()).find(s) != std::string::npos, e.what());
  }
  for (const std::string& cmd : {"inspect '" + opened_as.string() + "'",
                                "run -m '" + opened_as.string() + "' -p hi -n 1 --cache-experts 50%"}) {
    const auto r = run_sluice(cmd);
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
    for (const auto& s : expected) CHECK_MESSAGE(r.err.find(s) != std::string::npos, r.err);
  }
}

}  // namespace

TEST_CASE("a split set with a missing part is refused naming the part") {
  auto parts = copy_set("missing");
  fs::remove(parts[1]);
  expect_refused(parts[0], {"part 2 of 3", parts[1].string(), "missing"});
  expect_refused(parts[2], {"part 2 of 3", parts[1].string(), "missing"});
}

TEST_CASE("a split set with a duplicate part is refused naming the part") {
  auto parts = copy_set("duplicate");
  fs::copy_file(parts[1], parts[2], fs::copy_options::overwrite_existing);
  expect_refused(parts[0], {"part 3 of 3", parts[2].string(), "split.no = 1", "duplicate"});
}

TEST_CASE("a split part with a wrong split.count is refused naming the part") {
  auto parts = copy_set("count");
  const uint16_t four = 4;
  patch_value(parts[1], "split.count", &four, 2);
  expect_refused(parts[2], {"part 2 of 3", parts[1].string(), "split.count = 4", "wrong count"});
}

TEST_CASE("a part of another model is refused naming the part: tensor total or architecture differ") {
  SUBCASE("tensor total") {
    auto parts = copy_set("other-total");
    const int32_t forty = 40;
    patch_value(parts[2], "split.tensors.count", &forty, 4);
    expect_refused(parts[0], {"part 3 of 3", parts[2].string(), "another model", "split.tensors.count = 40"});
  }
  SUBCASE("architecture") {
    auto parts = copy_set("other-arch");
    core::GgufWriter w;
    {
      io::PreadReader reader(parts[1].string(), alone());
      const core::GgufFile f = parse_alone(parts[1], reader);
      core::copy_gguf(reader, f, w);
    }
    w.set_string("general.architecture", "qwen3moe");
    w.write(parts[1].string());
    expect_refused(parts[0], {"part 2 of 3", parts[1].string(), "another model", "qwen3moe"});
  }
}

TEST_CASE("a truncated split part is refused naming the part") {
  auto parts = copy_set("truncated");
  fs::resize_file(parts[2], fs::file_size(parts[2]) - 5000);
  expect_refused(parts[1], {"part 3 of 3", parts[2].string(), "past end of file"});
  fs::resize_file(parts[1], 100);  // cut inside the header
  expect_refused(parts[0], {"part 2 of 3", parts[1].string(), "truncated"});
}

TEST_CASE("a split part renamed out of the naming pattern is refused: its siblings cannot be found") {
  const auto dir = temp_dir("split-lone");
  const auto lone = dir / "model.gguf";
  fs::copy_file(tiny_dir("deepseek2") / "split" / kParts[0], lone);
  expect_refused(lone, {lone.string(), "part 1 of a model split into 3 files", "-00001-of-00003.gguf"});
}
