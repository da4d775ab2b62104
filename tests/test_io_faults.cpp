// FaultInjectingReader: transient faults never change the bytes a caller sees; -EIO and bit
// flips reach the caller, named by offset and counted.
#include <doctest/doctest.h>

#include <cerrno>
#include <filesystem>

#include "common/error.h"
#include "io/fault_reader.h"
#include "io/pread_reader.h"
#include "io/uring_reader.h"
#include "tests/io_extent_check.h"
#include "tests/io_test_files.h"

using namespace sluice;
using sluice::test::Placement;

namespace {

struct TestFile {
  test::ScopedDir dir;
  std::filesystem::path path;
  std::vector<uint8_t> bytes;
};

TestFile make_file(const std::string& name, uint64_t size = (6u << 20) + 4321) {
  auto dir = test::disk_dir(name);
  if (dir.empty()) dir = test::temp_dir(name);
  TestFile f{test::ScopedDir(dir), dir / "data.bin", test::pattern_bytes(size, 23)};
  test::write_file(f.path, f.bytes);
  return f;
}

std::unique_ptr<io::Reader> inner_reader(const std::string& kind, const std::string& path) {
  if (kind == "uring") return std::make_unique<io::UringReader>(path);
  return std::make_unique<io::PreadReader>(path, io::PreadOptions{3, false});
}

}  // namespace

TEST_CASE("transient faults leave the bytes identical to a clean read and are counted") {
  TestFile f = make_file("transient");
  for (std::string kind : {"uring", "pread"}) {
    CAPTURE(kind);
    io::FaultOptions o;
    o.seed = 77;
    o.short_read_rate = 0.3;
    o.eagain_rate = 0.2;
    o.delay_rate = 0.3;
    io::FaultInjectingReader reader(inner_reader(kind, f.path.string()), o);
    CHECK(reader.backend() == "faulty-" + kind);
    auto check = test::check_extents(reader, f.bytes, test::random_extents(f.bytes.size(), 150, 31), 32,
                                     Placement::arbitrary);
    CHECK(check.failed == 0);
    CHECK(check.mismatched == 0);
    CHECK(check.verified == 150);
    io::FaultCounts c = reader.counts();
    CHECK(c.short_reads > 0);
    CHECK(c.eagains > 0);
    CHECK(c.delays > 0);
    CHECK(c.transient_eios + c.persistent_eios + c.bit_flips == 0);
    CHECK(reader.in_flight() == 0);
    // read_sync goes through the same faults.
    std::vector<std::byte> buf(300000);
    reader.read_sync(12345, buf);
    CHECK(std::memcmp(buf.data(), f.bytes.data() + 12345, buf.size()) == 0);
  }
}

TEST_CASE("delayed completions come back out of submission order") {
  TestFile f = make_file("reorder");
  io::FaultOptions o;
  o.seed = 5;
  o.delay_rate = 0.5;
  io::FaultInjectingReader reader(std::make_unique<io::PreadReader>(f.path.string()), o);
  std::vector<std::byte> buf(64 * 100);
  std::vector<io::ReadRequest> requests;
  for (uint64_t i = 0; i < 64; ++i) requests.push_back({i * 1000, 100, buf.data() + i * 100, i});
  reader.submit(requests);
  std::vector<uint64_t> order;
  io::Completion c[8];
  while (reader.in_flight() > 0) {
    size_t n = reader.reap(c, 1);
    for (size_t k = 0; k < n; ++k) order.push_back(c[k].request.tag);
  }
  REQUIRE(order.size() == 64);
  CHECK_FALSE(std::is_sorted(order.begin(), order.end()));
  CHECK(reader.counts().delays > 0);
}

TEST_CASE("a transient EIO reaches the caller once and a retry of the extent succeeds") {
  TestFile f = make_file("transient-eio");
  io::FaultOptions o;
  o.transient_eio_rate = 1.0;  // every extent fails on its first read
  io::FaultInjectingReader reader(std::make_unique<io::UringReader>(f.path.string()), o);
  std::vector<std::byte> buf(5000);
  io::ReadRequest r{4097, 5000, buf.data(), 9};
  reader.submit({&r, 1});
  io::Completion c;
  REQUIRE(reader.reap({&c, 1}, 1) == 1);
  CHECK(c.result == -EIO);
  CHECK(c.request.offset == 4097);
  reader.submit({&r, 1});  // the caller's retry
  REQUIRE(reader.reap({&c, 1}, 1) == 1);
  CHECK(c.result == 5000);
  CHECK(std::memcmp(buf.data(), f.bytes.data() + 4097, 5000) == 0);
  CHECK(reader.counts().transient_eios == 1);
}

TEST_CASE("a persistent EIO surfaces every time as an error naming the offset") {
  TestFile f = make_file("persistent-eio");
  io::FaultOptions o;
  o.fail_offsets = {1048577};
  io::FaultInjectingReader reader(std::make_unique<io::UringReader>(f.path.string()), o);
  std::vector<std::byte> buf(70000);
  for (int attempt = 0; attempt < 3; ++attempt) {
    io::ReadRequest requests[] = {{1048577, 70000, buf.data(), 1}, {0, 10, buf.data(), 2}};
    reader.submit(requests);
    io::Completion c[2];
    REQUIRE(reader.reap(c, 2) == 2);
    for (const auto& done : c) {
      if (done.request.tag == 1) {
        CHECK(done.result == -EIO);
        CHECK(io::describe_read_failure(reader.path(), done.request.offset, done.request.length, done.result)
                  .find("offset 1048577") != std::string::npos);
      } else {
        CHECK(done.result == 10);
      }
    }
  }
  try {
    reader.read_sync(1048577, buf);
    FAIL("read_sync of a failing extent did not throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::io_error);
    CHECK(std::string(e.what()).find("offset 1048577") != std::string::npos);
    CHECK(std::string(e.what()).find("Input/output error") != std::string::npos);
  }
  CHECK(reader.counts().persistent_eios == 4);
}

TEST_CASE("a seeded fraction of extents fails persistently, the same ones every time") {
  TestFile f = make_file("persistent-rate");
  io::FaultOptions o;
  o.persistent_eio_rate = 0.3;
  io::FaultInjectingReader reader(std::make_unique<io::PreadReader>(f.path.string()), o);
  auto extents = test::random_extents(f.bytes.size(), 60, 3);
  std::vector<std::byte> buf(6u << 20);
  for (auto& e : extents) e.dst = buf.data();
  std::vector<uint64_t> failed[2];
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& e : extents) {
      reader.submit({&e, 1});
      io::Completion c;
      REQUIRE(reader.reap({&c, 1}, 1) == 1);
      if (c.result < 0) failed[pass].push_back(c.request.tag);
    }
  }
  CHECK(failed[0].size() > 0);
  CHECK(failed[0].size() < extents.size());
  CHECK(failed[0] == failed[1]);
}

TEST_CASE("flipped bits reach the caller as successful reads and are counted") {
  TestFile f = make_file("bitflip");
  io::FaultOptions o;
  o.bit_flip_rate = 0.5;
  io::FaultInjectingReader reader(std::make_unique<io::UringReader>(f.path.string()), o);
  auto check = test::check_extents(reader, f.bytes, test::random_extents(f.bytes.size(), 80, 41), 16,
                                   Placement::arbitrary);
  CHECK(check.failed == 0);
  CHECK(check.mismatched == reader.counts().bit_flips);  // one flipped bit per corrupted extent
  CHECK(reader.counts().bit_flips > 0);
}

TEST_CASE("a fault spec string maps onto fault options and rejects bad items") {
  io::FaultOptions o = io::parse_fault_options("seed=9,short=0.25,eagain=0.1,delay=0.5,eio=0.01,eio_always=0.001,flip=0.2,fail_at=4096,fail_at=8192");
  CHECK(o.seed == 9);
  CHECK(o.short_read_rate == 0.25);
  CHECK(o.eagain_rate == 0.1);
  CHECK(o.delay_rate == 0.5);
  CHECK(o.transient_eio_rate == 0.01);
  CHECK(o.persistent_eio_rate == 0.001);
  CHECK(o.bit_flip_rate == 0.2);
  CHECK(o.fail_offsets == std::vector<uint64_t>{4096, 8192});
  for (const char* bad : {"short=2", "bogus=0.1", "seed=x", "short"}) {
    CAPTURE(bad);
    try {
      io::parse_fault_options(bad);
      FAIL("accepted a bad fault spec");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find("--io-faults") != std::string::npos);
      CHECK(std::string(e.what()).find(bad) != std::string::npos);
    }
  }
}
