// Both readers return exactly the file's bytes for random extents with many in flight, and
// reject reads past the end and unreadable files with errors that name the path and offset.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <filesystem>

#include "common/error.h"
#include "io/open_reader.h"
#include "io/pread_reader.h"
#include "io/uring_reader.h"
#include "tests/io_extent_check.h"
#include "tests/io_test_files.h"

using namespace sluice;
using sluice::test::Placement;

namespace {

constexpr uint64_t kFileSize = (24u << 20) + 12345;  // not a multiple of any block size

struct TestFile {
  test::ScopedDir dir;
  std::filesystem::path path;
  std::vector<uint8_t> bytes;
};

TestFile make_file(std::filesystem::path dir, uint64_t size = kFileSize, uint64_t seed = 7) {
  TestFile f{test::ScopedDir(dir), dir / "data.bin", test::pattern_bytes(size, seed)};
  test::write_file(f.path, f.bytes);
  return f;
}

std::filesystem::path disk_or_temp(const std::string& name) {
  auto dir = test::disk_dir(name);
  return dir.empty() ? test::temp_dir(name) : dir;
}

void expect_exact(io::Reader& reader, const TestFile& f, Placement placement, size_t in_flight = 48) {
  auto check = test::check_extents(reader, f.bytes, test::random_extents(f.bytes.size(), 240, 99),
                                   in_flight, placement);
  CHECK(check.failed == 0);
  CHECK(check.mismatched == 0);
  CHECK(check.verified == 240);
}

}  // namespace

TEST_CASE("uring reader with O_DIRECT returns the exact bytes of random extents, many in flight") {
  auto dir = test::disk_dir("uring-direct");
  if (dir.empty()) {
    MESSAGE("skipped: no disk-backed directory for O_DIRECT");
    return;
  }
  TestFile f = make_file(dir);
  io::UringReader reader(f.path.string());
  if (!reader.direct()) MESSAGE("file system refused O_DIRECT: " << reader.notice());
  CHECK(reader.file_size() == kFileSize);
  SUBCASE("arbitrary destinations go through staging") { expect_exact(reader, f, Placement::arbitrary); }
  SUBCASE("placed destinations read the interior directly") {
    expect_exact(reader, f, Placement::zero_copy);
    if (reader.direct()) CHECK(reader.stats().direct_ops > 0);
  }
  SUBCASE("queue depth 1 still completes everything") {
    io::UringOptions o;
    o.queue_depth = 1;
    o.staging_bytes = 0;  // two slots
    io::UringReader small(f.path.string(), o);
    expect_exact(small, f, Placement::arbitrary, 8);
  }
  CHECK(reader.in_flight() == 0);
}

TEST_CASE("uring reader without O_DIRECT returns the exact bytes") {
  TestFile f = make_file(disk_or_temp("uring-buffered"));
  io::UringOptions o;
  o.direct = false;
  io::UringReader reader(f.path.string(), o);
  CHECK_FALSE(reader.direct());
  CHECK(reader.notice().empty());
  expect_exact(reader, f, Placement::arbitrary);
}

TEST_CASE("pread reader returns the exact bytes, synchronously and with workers") {
  TestFile f = make_file(disk_or_temp("pread"));
  SUBCASE("synchronous") {
    io::PreadReader reader(f.path.string());
    expect_exact(reader, f, Placement::arbitrary);
  }
  SUBCASE("four workers") {
    io::PreadReader reader(f.path.string(), io::PreadOptions{4, true});
    expect_exact(reader, f, Placement::arbitrary);
  }
}

TEST_CASE("a read past the end of file completes with an error carrying its offset") {
  TestFile f = make_file(disk_or_temp("eof"), 10000);
  io::UringReader uring(f.path.string());
  io::PreadReader pread(f.path.string());
  for (io::Reader* reader : {static_cast<io::Reader*>(&uring), static_cast<io::Reader*>(&pread)}) {
    CAPTURE(reader->backend());
    std::vector<std::byte> buf(8192);
    io::ReadRequest requests[] = {{9000, 2000, buf.data(), 1}, {20000, 10, buf.data(), 2}, {0, 100, buf.data(), 3}};
    reader->submit(requests);
    io::Completion done[3];
    size_t n = reader->reap(done, 3);
    REQUIRE(n == 3);
    for (const auto& c : done) {
      if (c.request.tag == 3) CHECK(c.result == 100);
      else CHECK(c.result == -ENODATA);
    }
    try {
      reader->read_sync(9000, std::span(buf).first(2000));
      FAIL("read_sync past the end did not throw");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::io_error);
      CHECK(std::string(e.what()).find("offset 9000") != std::string::npos);
      CHECK(std::string(e.what()).find("past end of file") != std::string::npos);
      CHECK(std::string(e.what()).find(f.path.string()) != std::string::npos);
    }
    // The last whole bytes of the file are still readable.
    reader->read_sync(9990, std::span(buf).first(10));
    CHECK(std::memcmp(buf.data(), f.bytes.data() + 9990, 10) == 0);
  }
}

TEST_CASE("opening a missing or unreadable file is an io_error naming the path") {
  auto dir = test::temp_dir("missing");
  std::string missing = (dir / "nope.gguf").string();
  for (io::IoKind kind : {io::IoKind::automatic, io::IoKind::uring, io::IoKind::pread}) {
    CAPTURE(io::to_string(kind));
    io::IoOptions o;
    o.kind = kind;
    try {
      io::open_reader(missing, o);
      FAIL("opening a missing file did not throw");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::io_error);
      CHECK(std::string(e.what()).find(missing) != std::string::npos);
    }
    try {
      io::open_reader(dir.string(), o);  // a directory
      FAIL("opening a directory did not throw");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::io_error);
      CHECK(std::string(e.what()).find(dir.string()) != std::string::npos);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("zero-length reads complete at once with result 0") {
  TestFile f = make_file(disk_or_temp("zero"), 5000);
  io::UringReader reader(f.path.string());
  std::byte b;
  io::ReadRequest r{123, 0, &b, 5};
  reader.submit({&r, 1});
  io::Completion c;
  REQUIRE(reader.reap({&c, 1}, 1) == 1);
  CHECK(c.result == 0);
  CHECK(c.request.tag == 5);
}

TEST_CASE("one thread submits, another reaps and a third reads synchronously, on every backend") {
  TestFile f = make_file(disk_or_temp("threads"));
  for (io::IoKind kind : {io::IoKind::uring, io::IoKind::pread}) {
    CAPTURE(io::to_string(kind));
    io::IoOptions o;
    o.kind = kind;
    o.queue_depth = 16;
    auto opened = io::open_reader(f.path.string(), o);
    io::Reader& reader = *opened.reader;
    auto extents = test::random_extents(f.bytes.size(), 200, 57);
    std::vector<std::vector<std::byte>> buffers(extents.size());
    for (size_t i = 0; i < extents.size(); ++i) {
      buffers[i].resize(extents[i].length);
      extents[i].dst = buffers[i].data();
    }
    std::atomic<size_t> submitted{0};
    std::thread producer([&] {
      for (size_t i = 0; i < extents.size(); i += 5) {
        size_t n = std::min<size_t>(5, extents.size() - i);
        reader.submit(std::span(extents).subspan(i, n));
        submitted += n;
      }
    });
    std::atomic<int> sync_bad{0};
    std::thread syncer([&] {
      std::vector<std::byte> buf(70000);
      for (uint64_t k = 0; k < 20; ++k) {
        uint64_t offset = (k * 1234567) % (f.bytes.size() - buf.size());
        reader.read_sync(offset, buf);
        if (std::memcmp(buf.data(), f.bytes.data() + offset, buf.size()) != 0) ++sync_bad;
      }
    });
    size_t received = 0, bad = 0;
    io::Completion done[16];
    while (received < extents.size()) {
      if (reader.in_flight() == 0) {
        std::this_thread::yield();
        continue;
      }
      size_t n = reader.reap(done, 1);
      for (size_t k = 0; k < n; ++k) {
        const auto& c = done[k];
        if (c.result != static_cast<int64_t>(c.request.length) ||
            std::memcmp(c.request.dst, f.bytes.data() + c.request.offset, c.request.length) != 0) {
          ++bad;
        }
      }
      received += n;
    }
    producer.join();
    syncer.join();
    CHECK(received == extents.size());
    CHECK(bad == 0);
    CHECK(sync_bad == 0);
    CHECK(reader.in_flight() == 0);
  }
}
