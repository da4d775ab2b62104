#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/gguf/gguf_stream_writer.h"
#include "io/aligned_buffer.h"
#include "io/file_sink.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::Error;
using sluice::ErrorCode;
using sluice::GgmlType;
using sluice::core::GgufFile;
using sluice::core::GgufStreamWriter;
using sluice::core::StreamTensor;

namespace {

std::byte pattern(size_t tensor, uint64_t pos) { return std::byte(static_cast<uint8_t>(tensor * 31 + pos * 7 + (pos >> 9))); }

GgufFile parse(const fs::path& p) {
  sluice::io::PreadReader r(p.string());
  return GgufFile::parse(r);
}

}  // namespace

TEST_CASE("stream writer output parses back with every key type, string arrays and aligned tensor data") {
  const fs::path dir = sluice::test::temp_dir("stream_writer");
  const fs::path path = dir / "all.gguf";
  GgufStreamWriter w;
  w.add_u8("k.u8", 200);
  w.add_i8("k.i8", -5);
  w.add_u16("k.u16", 65000);
  w.add_i16("k.i16", -30000);
  w.add_u32("k.u32", 4000000000u);
  w.add_i32("k.i32", -2000000000);
  w.add_u64("k.u64", 1ull << 40);
  w.add_i64("k.i64", -(1ll << 40));
  w.add_f32("k.f32", 2.827f);
  w.add_f64("k.f64", 0.125);
  w.add_bool("k.bool", true);
  w.add_string("k.str", "deepseek2");
  const std::vector<std::string> strs = {"a", "", "Ġthe", "<|im_end|>"};
  w.add_string_array("k.strs", strs);
  const std::vector<float> fl = {0.5f, -1.0f};
  w.add_f32_array("k.f32s", fl);
  const std::vector<int32_t> in = {1, 3, 3};
  w.add_i32_array("k.i32s", in);
  CHECK(w.has_key("k.strs"));
  // A tensor bigger than the ring's chunks, odd sizes that need padding, 3-d quantized data.
  w.add_tensor("big.weight", GgmlType::F32, {1024, 9});      // 36 KiB, many chunks
  w.add_tensor("odd.weight", GgmlType::F32, {7});            // 28 bytes: next offset padded
  w.add_tensor("q.weight", GgmlType::Q4_K, {512, 3});
  w.add_tensor("e.weight", GgmlType::Q8_0, {64, 5, 2});
  w.add_tensor("h.weight", GgmlType::F16, {3, 1});
  uint64_t last_done = 0;
  bool monotone = true;
  w.write(path.string(), [&](const StreamTensor& t, uint64_t off, std::span<std::byte> dst) {
        CHECK(off % t.row_bytes == 0);  // rows fit in 4 KiB chunks here, so pieces are whole rows
        CHECK(dst.size() % t.row_bytes == 0);
        for (size_t i = 0; i < dst.size(); ++i) dst[i] = pattern(t.index, off + i);
      },
      [&](uint64_t done, uint64_t total) {
        monotone = monotone && done >= last_done && done <= total;
        last_done = done;
      },
      4096, 2);
  CHECK(monotone);
  CHECK(last_done == w.file_bytes());
  CHECK(fs::file_size(path) == w.file_bytes());

  const GgufFile f = parse(path);
  CHECK(f.version() == 3);
  CHECK(f.get_uint("k.u8") == 200);
  CHECK(f.get_int("k.i8") == -5);
  CHECK(f.get_uint("k.u16") == 65000);
  CHECK(f.get_int("k.i16") == -30000);
  CHECK(f.get_uint("k.u32") == 4000000000u);
  CHECK(f.get_int("k.i32") == -2000000000);
  CHECK(f.get_uint("k.u64") == (1ull << 40));
  CHECK(f.get_int("k.i64") == -(1ll << 40));
  CHECK(f.get_float("k.f32") == doctest::Approx(2.827));
  CHECK(f.get_float("k.f64") == 0.125);
  CHECK(f.get_bool("k.bool"));
  CHECK(f.get_string("k.str") == "deepseek2");
  CHECK(f.get_string_array("k.strs") == strs);
  CHECK(f.get_float_array("k.f32s") == fl);
  CHECK(f.get_int_array("k.i32s") == std::vector<int64_t>{1, 3, 3});

  REQUIRE(f.tensors().size() == 5);
  const auto& big = f.tensor("big.weight");
  CHECK(big.ne[0] == 1024);
  CHECK(big.ne[1] == 9);
  const auto& e = f.tensor("e.weight");
  CHECK(e.type == GgmlType::Q8_0);
  CHECK(e.n_dims == 3);
  CHECK(e.ne[2] == 2);
  CHECK(e.n_bytes == 2u * 5 * 2 * 34);
  const auto bytes = sluice::test::read_file(path);
  for (size_t ti = 0; ti < f.tensors().size(); ++ti) {
    const auto& t = f.tensors()[ti];
    CAPTURE(t.name);
    CHECK(t.offset % 32 == 0);
    CHECK(t.n_bytes == w.tensors()[ti].n_bytes);
    bool same = true;
    for (uint64_t i = 0; i < t.n_bytes; ++i) same = same && std::byte(bytes[t.file_offset + i]) == pattern(ti, i);
    CHECK(same);
  }
  CHECK(f.data_offset() + w.data_bytes() == f.file_size());
}

TEST_CASE("stream writer rejects bad tensors and keys with the field named") {
  GgufStreamWriter w;
  w.add_u32("a.b", 1);
  try {
    w.add_u32("a.b", 2);
    FAIL("duplicate key accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("'a.b' added twice") != std::string::npos);
  }
  try {
    w.add_tensor("blk.0.attn_k_b.weight", GgmlType::Q4_K, {128, 512});
    FAIL("128-long q4_K rows accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("ne[0] = 128 is not a multiple of the q4_K block size 256") != std::string::npos);
  }
  w.add_tensor("t", GgmlType::F32, {4});
  CHECK_THROWS_AS(w.add_tensor("t", GgmlType::F32, {4}), Error);
  CHECK_THROWS_AS(w.add_tensor("z", GgmlType::F32, {0}), Error);
  CHECK_THROWS_AS(w.add_tensor(std::string(64, 'x'), GgmlType::F32, {4}), Error);
}

TEST_CASE("stream writer reports an unwritable path and removes the partial file when a fill fails") {
  GgufStreamWriter w;
  w.add_tensor("t", GgmlType::F32, {1024, 64});
  auto zero = [](const StreamTensor&, uint64_t, std::span<std::byte> dst) { std::memset(dst.data(), 0, dst.size()); };
  try {
    w.write("/nonexistent-dir/x.gguf", zero);
    FAIL("write to a missing directory succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::io_error);
    CHECK(std::string(e.what()).find("/nonexistent-dir/x.gguf") != std::string::npos);
  }
  const fs::path path = sluice::test::temp_dir("stream_writer_fail") / "partial.gguf";
  int calls = 0;
  CHECK_THROWS_AS(w.write(path.string(),
                          [&](const StreamTensor&, uint64_t, std::span<std::byte> dst) {
                            if (++calls == 3) throw Error(ErrorCode::internal, "generator failed");
                            std::memset(dst.data(), 0, dst.size());
                          },
                          {}, 4096, 2),
                  Error);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("file sink writes aligned direct chunks and an unaligned tail with the exact bytes") {
  const fs::path dir = sluice::test::temp_dir("sink");
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    const fs::path path = dir / (direct ? "direct.bin" : "buffered.bin");
    sluice::io::AlignedBuffer buf(3 * sluice::io::FileSink::kDirectAlign);
    for (size_t i = 0; i < buf.size(); ++i) buf.data()[i] = std::byte(static_cast<uint8_t>(i * 13 + 1));
    {
      sluice::io::FileSink sink(path.string(), direct);
      sink.write(std::span<const std::byte>(buf.data(), 2 * sluice::io::FileSink::kDirectAlign));
      sink.write(std::span<const std::byte>(buf.data(), sluice::io::FileSink::kDirectAlign + 100));  // last: tail
      CHECK(sink.offset() == 3 * sluice::io::FileSink::kDirectAlign + 100);
      sink.close();
    }
    const auto bytes = sluice::test::read_file(path);
    REQUIRE(bytes.size() == 3 * sluice::io::FileSink::kDirectAlign + 100);
    bool same = true;
    for (size_t i = 0; i < bytes.size(); ++i) {
      const size_t src = i < 2 * sluice::io::FileSink::kDirectAlign ? i : i - 2 * sluice::io::FileSink::kDirectAlign;
      same = same && std::byte(bytes[i]) == buf.data()[src];
    }
    CHECK(same);
  }
  CHECK_THROWS_AS(sluice::io::FileSink("/nonexistent-dir/f.bin", true), Error);
}
