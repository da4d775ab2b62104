#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "io/pread_reader.h"
#include "tests/gguf_bytes.h"
#include "tests/test_support.h"

using sluice::Error;
using sluice::ErrorCode;
using sluice::core::GgufFile;
using sluice::test::GgufBytes;

namespace {

GgufFile parse_bytes(const GgufBytes& g) {
  auto dir = sluice::test::temp_dir("gguf");
  auto path = dir / "model.gguf";
  sluice::test::write_file(path, g.b);
  sluice::io::PreadReader reader(path.string());
  return GgufFile::parse(reader);
}

// Parses and returns the error; fails the test when parsing succeeds.
Error parse_error(const GgufBytes& g) {
  try {
    parse_bytes(g);
  } catch (const Error& e) {
    return e;
  }
  FAIL("the file was accepted");
  return Error(ErrorCode::internal, "unreachable");
}

void check_rejected(const GgufBytes& g, ErrorCode code, const std::string& fragment) {
  Error e = parse_error(g);
  CHECK(e.code() == code);
  CHECK_MESSAGE(std::string(e.what()).find(fragment) != std::string::npos, "message: ", std::string(e.what()));
}

// A small valid file: two metadata keys and two F32 tensors of 8 and 4 values.
GgufBytes valid_file() {
  GgufBytes g;
  g.header(3, 2, 2).kv_str("general.architecture", "test").kv_u32("test.block_count", 2);
  g.tensor("a.weight", {8}, 0, 0).tensor("b.weight", {4}, 0, 32);
  g.pad_to(32).zeros(32 + 16);
  return g;
}

}  // namespace

TEST_CASE("a well-formed GGUF file yields its metadata and tensor directory") {
  GgufFile f = parse_bytes(valid_file());
  CHECK(f.version() == 3);
  CHECK(f.architecture() == "test");
  CHECK(f.get_uint("test.block_count") == 2);
  REQUIRE(f.tensors().size() == 2);
  CHECK(f.tensor("b.weight").offset == 32);
  CHECK(f.tensor("b.weight").n_bytes == 16);
  CHECK(f.tensor("b.weight").file_offset == f.data_offset() + 32);
  CHECK(f.data_offset() % 32 == 0);
}

TEST_CASE("a truncated file is rejected at every cut point") {
  GgufBytes full = valid_file();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    GgufBytes g;
    g.b.assign(full.b.begin(), full.b.begin() + static_cast<long>(cut));
    Error e = parse_error(g);
    CHECK(e.code() == ErrorCode::invalid_file);
    std::string m = e.what();
    bool named = m.find("truncated") != std::string::npos || m.find("past end of file") != std::string::npos ||
                 m.find("beyond end of file") != std::string::npos;
    CHECK_MESSAGE(named, "cut at ", cut, ": ", m);
  }
}

TEST_CASE("bad magic and unsupported versions are rejected") {
  GgufBytes g = valid_file();
  g.b[0] = 'X';
  check_rejected(g, ErrorCode::invalid_file, "bad magic");
  for (uint32_t v : {0u, 1u, 4u, 1000u}) {
    GgufBytes h = valid_file();
    std::memcpy(h.b.data() + 4, &v, 4);
    check_rejected(h, ErrorCode::invalid_file, "version " + std::to_string(v));
  }
}

TEST_CASE("GGUF version 2 files are readable") {
  GgufBytes g = valid_file();
  uint32_t v = 2;
  std::memcpy(g.b.data() + 4, &v, 4);
  CHECK(parse_bytes(g).version() == 2);
}

TEST_CASE("huge or negative tensor and key counts are rejected before allocating") {
  GgufBytes g;
  g.header(3, std::numeric_limits<uint64_t>::max(), 0);
  check_rejected(g, ErrorCode::invalid_file, "n_tensors");
  GgufBytes h;
  h.header(3, 0, std::numeric_limits<uint64_t>::max());
  check_rejected(h, ErrorCode::invalid_file, "n_kv");
  GgufBytes k;
  k.header(3, 0, 1000);  // plausible count, but the file ends
  check_rejected(k, ErrorCode::invalid_file, "truncated");
}

TEST_CASE("string lengths of 2^64-1 or past end of file are rejected") {
  GgufBytes g;
  g.header(3, 0, 1).u64(std::numeric_limits<uint64_t>::max());
  check_rejected(g, ErrorCode::invalid_file, "beyond end of file");
  GgufBytes h;
  h.header(3, 0, 1).str("k").u32(8).u64(1000).raw("abc", 3);
  check_rejected(h, ErrorCode::invalid_file, "beyond end of file");
}

TEST_CASE("empty and duplicate metadata keys are rejected") {
  GgufBytes g;
  g.header(3, 0, 1).kv_u32("", 1);
  check_rejected(g, ErrorCode::invalid_file, "is empty");
  GgufBytes h;
  h.header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  check_rejected(h, ErrorCode::invalid_file, "duplicate metadata key 'a.b'");
}

TEST_CASE("metadata value types out of range are rejected") {
  GgufBytes g;
  g.header(3, 0, 1).str("k").u32(13).u32(0);
  check_rejected(g, ErrorCode::invalid_file, "value type 13");
  GgufBytes h;
  h.header(3, 0, 1).str("k").u32(9).u32(99).u64(1);
  check_rejected(h, ErrorCode::invalid_file, "element type 99");
}

TEST_CASE("arrays of arrays and oversized arrays are rejected") {
  GgufBytes g;
  g.header(3, 0, 1).str("k").u32(9).u32(9).u64(1);
  check_rejected(g, ErrorCode::invalid_file, "nested arrays");
  GgufBytes h;
  h.header(3, 0, 1).str("k").u32(9).u32(10).u64(std::numeric_limits<uint64_t>::max() / 4);
  check_rejected(h, ErrorCode::invalid_file, "overflows");
  GgufBytes k;
  k.header(3, 0, 1).str("k").u32(9).u32(4).u64(1000).u32(1);
  check_rejected(k, ErrorCode::invalid_file, "beyond end of file");
  GgufBytes s;
  s.header(3, 0, 1).str("k").u32(9).u32(8).u64(1ull << 40);
  check_rejected(s, ErrorCode::invalid_file, "more than the");
}

TEST_CASE("general.alignment must be a u32 power of two up to 1 MiB") {
  for (uint32_t a : {0u, 3u, 48u, 2u << 20}) {
    GgufBytes g;
    g.header(3, 0, 1).kv_u32("general.alignment", a);
    check_rejected(g, ErrorCode::invalid_file, "general.alignment = " + std::to_string(a));
  }
  GgufBytes h;
  h.header(3, 0, 1).kv_str("general.alignment", "32");
  check_rejected(h, ErrorCode::invalid_file, "general.alignment must be u32");
  GgufBytes ok;
  ok.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("t", {4}, 0, 0).pad_to(64).zeros(16);
  CHECK(parse_bytes(ok).data_offset() % 64 == 0);
}

TEST_CASE("tensor names must be non-empty, unique and shorter than 64 bytes") {
  GgufBytes g;
  g.header(3, 1, 0).tensor("", {4}, 0, 0).pad_to(32).zeros(16);
  check_rejected(g, ErrorCode::invalid_file, "empty name");
  GgufBytes h;
  h.header(3, 1, 0).tensor(std::string(64, 'x'), {4}, 0, 0).pad_to(32).zeros(16);
  check_rejected(h, ErrorCode::invalid_file, "64 bytes long");
  GgufBytes k;
  k.header(3, 2, 0).tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).pad_to(32).zeros(64);
  check_rejected(k, ErrorCode::invalid_file, "duplicate tensor name 't'");
}

TEST_CASE("tensor dimensions are checked: n_dims, non-positive dims and element overflow") {
  for (uint32_t nd : {0u, 5u}) {
    GgufBytes g;
    g.header(3, 1, 0).str("t").u32(nd);
    for (uint32_t i = 0; i < nd; ++i) g.i64(1);
    g.u32(0).u64(0).pad_to(32).zeros(16);
    check_rejected(g, ErrorCode::invalid_file, "n_dims = " + std::to_string(nd));
  }
  for (int64_t bad : {0LL, -1LL}) {
    GgufBytes g;
    g.header(3, 1, 0).tensor("t", {4, bad}, 0, 0).pad_to(32).zeros(16);
    check_rejected(g, ErrorCode::invalid_file, "ne[1] = " + std::to_string(bad));
  }
  GgufBytes h;
  h.header(3, 1, 0).tensor("t", {std::numeric_limits<int64_t>::max(), 2}, 0, 0).pad_to(32).zeros(16);
  check_rejected(h, ErrorCode::invalid_file, "element count overflows");
}

TEST_CASE("unknown and removed tensor types are rejected") {
  GgufBytes g;
  g.header(3, 1, 0).tensor("t", {32}, 77, 0).pad_to(32).zeros(64);
  check_rejected(g, ErrorCode::invalid_file, "unknown ggml type id 77");
  GgufBytes h;
  h.header(3, 1, 0).tensor("t", {32}, 4, 0).pad_to(32).zeros(64);
  check_rejected(h, ErrorCode::invalid_file, "removed");
}

TEST_CASE("a row length that is not a multiple of the block size is rejected") {
  GgufBytes g;
  g.header(3, 1, 0).tensor("t", {100}, 12, 0).pad_to(32).zeros(1024);
  check_rejected(g, ErrorCode::invalid_file, "not a multiple of the q4_K block size 256");
}

TEST_CASE("tensor byte sizes that overflow are rejected") {
  GgufBytes g;  // F32: 2^62 values fit in int64, but 2^64 bytes do not
  g.header(3, 1, 0).tensor("t", {1LL << 40, 1LL << 22}, 0, 0).pad_to(32).zeros(16);
  check_rejected(g, ErrorCode::invalid_file, "overflows");
}

TEST_CASE("misaligned, out-of-file, wrapping and overlapping tensor offsets are rejected") {
  GgufBytes g;
  g.header(3, 1, 0).tensor("t", {4}, 0, 8).pad_to(32).zeros(64);
  check_rejected(g, ErrorCode::invalid_file, "not a multiple of the alignment 32");
  GgufBytes h;
  h.header(3, 1, 0).tensor("t", {1024}, 0, 0).pad_to(32).zeros(64);
  check_rejected(h, ErrorCode::invalid_file, "past end of file");
  GgufBytes w;
  w.header(3, 1, 0).tensor("t", {8}, 0, std::numeric_limits<uint64_t>::max() - 31).pad_to(32).zeros(64);
  check_rejected(w, ErrorCode::invalid_file, "wraps around");
  GgufBytes o;
  o.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad_to(32).zeros(128);
  check_rejected(o, ErrorCode::invalid_file, "overlap");
}

TEST_CASE("metadata and tensor counts above the sanity limits are rejected") {
  GgufBytes g;
  g.header(3, (1u << 20) + 1, 0);
  check_rejected(g, ErrorCode::invalid_file, "exceeds the limit");
  GgufBytes h;
  h.header(3, 0, (1u << 16) + 1);
  check_rejected(h, ErrorCode::invalid_file, "exceeds the limit");
}

TEST_CASE("typed metadata access names the key and both types on a mismatch") {
  GgufBytes g;
  g.header(3, 0, 3).kv_str("deepseek2.expert_count", "sixteen").kv_u32("x.count", 7);
  g.str("x.neg").u32(5).i32(-3);
  GgufFile f = parse_bytes(g);
  try {
    f.get_uint("deepseek2.expert_count");
    FAIL("accepted a string as an integer");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()) == "metadata key 'deepseek2.expert_count' is string, expected an unsigned integer");
  }
  CHECK(f.get_uint("x.count") == 7);
  CHECK(f.get_int("x.count") == 7);
  CHECK(f.get_int("x.neg") == -3);
  CHECK_THROWS_WITH_AS(f.get_uint("x.neg"), doctest::Contains("non-negative"), Error);
  CHECK_THROWS_WITH_AS(f.get_string("x.count"), doctest::Contains("is u32, expected string"), Error);
  CHECK_THROWS_WITH_AS(f.get_uint("x.missing"), doctest::Contains("missing metadata key 'x.missing'"), Error);
  CHECK(f.get_uint_or("x.missing", 5) == 5);
  CHECK_THROWS_WITH_AS(f.tensor("nope"), doctest::Contains("missing tensor 'nope'"), Error);
}

TEST_CASE("bool values other than 0 and 1 are rejected") {
  GgufBytes g;
  g.header(3, 0, 1).str("b").u32(7).u8(2);
  check_rejected(g, ErrorCode::invalid_file, "must be 0 or 1");
}

TEST_CASE("a missing file is an io error naming the path") {
  CHECK_THROWS_WITH_AS(sluice::io::PreadReader("/nonexistent/model.gguf"),
                       doctest::Contains("/nonexistent/model.gguf"), Error);
}
