// Split models at the IO layer: a path naming any part of `<name>-NNNNN-of-MMMMM.gguf` opens every
// part, both readers present the parts as one address space (io/split_set.h) and return its exact
// bytes for random extents, including extents that cross a part's end and the zero padding
// between parts; io_uring registers every part's descriptor; a missing part is refused by name.
#include <doctest/doctest.h>

#include <filesystem>

#include "common/error.h"
#include "io/open_reader.h"
#include "io/pread_reader.h"
#include "io/split_set.h"
#include "io/uring_reader.h"
#include "tests/io_extent_check.h"
#include "tests/io_test_files.h"

using namespace sluice;
using sluice::test::Placement;

namespace {

// Part sizes that are not multiples of any block size, so every base has padding before it.
constexpr uint64_t kSizes[] = {(3u << 20) + 1001, (2u << 20) + 77, (4u << 20) + 4095};

struct SplitFiles {
  test::ScopedDir dir;
  std::vector<std::string> paths;
  std::vector<uint8_t> space;  // the address space's bytes: parts at their bases, zeros between
};

SplitFiles make_split(const std::filesystem::path& dir) {
  SplitFiles s{test::ScopedDir(dir), {}, {}};
  uint64_t base = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    const auto bytes = test::pattern_bytes(kSizes[i], 100 + i);
    s.paths.push_back(io::split_part_path((dir / "model").string(), i + 1, 3));
    test::write_file(s.paths.back(), bytes);
    s.space.resize(base, 0);
    s.space.insert(s.space.end(), bytes.begin(), bytes.end());
    base = (s.space.size() + io::kPartBaseAlignment - 1) / io::kPartBaseAlignment * io::kPartBaseAlignment;
  }
  return s;
}

std::filesystem::path disk_or_temp(const std::string& name) {
  auto dir = test::disk_dir(name);
  return dir.empty() ? test::temp_dir(name) : dir;
}

// Extents anywhere, plus ones placed across every part boundary and inside the padding.
std::vector<io::ReadRequest> extents_for(const SplitFiles& s, const std::vector<io::FilePart>& parts) {
  auto extents = test::random_extents(s.space.size(), 96, 5);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const uint64_t end = parts[i].base + parts[i].bytes, next = parts[i + 1].base;
    for (uint64_t len : {uint64_t{1}, uint64_t{100}, next - end, uint64_t{70000}, uint64_t{3u << 20}}) {
      extents.push_back({end - std::min<uint64_t>(len / 2 + 1, end), len, nullptr, 0});  // across the end
      extents.push_back({end, std::min<uint64_t>(len, next - end), nullptr, 0});         // padding only
      extents.push_back({next - 1, len, nullptr, 0});                                   // padding into the next part
    }
  }
  return extents;
}

void expect_exact(io::Reader& reader, const SplitFiles& s, Placement placement) {
  const auto extents = extents_for(s, reader.parts());
  auto check = test::check_extents(reader, s.space, extents, 32, placement);
  CHECK(check.failed == 0);
  CHECK(check.mismatched == 0);
  CHECK(check.verified == extents.size());
}

void expect_layout(const io::Reader& reader, const SplitFiles& s) {
  const auto parts = reader.parts();
  REQUIRE(parts.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(parts[i].path == s.paths[i]);
    CHECK(parts[i].bytes == kSizes[i]);
    CHECK(parts[i].base % io::kPartBaseAlignment == 0);
  }
  CHECK(parts[0].base == 0);
  CHECK(reader.file_size() == s.space.size());
}

}  // namespace

TEST_CASE("split names: the -NNNNN-of-MMMMM.gguf pattern gives every part's path") {
  auto n = io::parse_split_name("/m/kimi-k2-UD-IQ1_S-00002-of-00005.gguf");
  REQUIRE(n.has_value());
  CHECK(n->prefix == "/m/kimi-k2-UD-IQ1_S");
  CHECK(n->no == 2);
  CHECK(n->count == 5);
  CHECK(io::split_part_path(n->prefix, 5, 5) == "/m/kimi-k2-UD-IQ1_S-00005-of-00005.gguf");
  CHECK(io::split_first_part("/m/x-00003-of-00004.gguf") == "/m/x-00001-of-00004.gguf");
  CHECK(io::split_first_part("/m/x.gguf") == "/m/x.gguf");
  for (const char* plain : {"/m/x.gguf", "/m/x-0002-of-00005.gguf", "/m/x-00006-of-00005.gguf", "/m/x-00000-of-00005.gguf",
                            "/m/x-00001-of-00005.bin", "/m/-00001-of-00002.gguf", "x-00001-of-0000a.gguf"}) {
    CAPTURE(plain);
    CHECK_FALSE(io::parse_split_name(plain).has_value());
  }
}

TEST_CASE("a split set reads as one address space with both readers, across part ends and padding") {
  SplitFiles s = make_split(disk_or_temp("split-read"));
  // Any part's path opens the same set.
  for (const std::string& opened_as : s.paths) {
    CAPTURE(opened_as);
    io::UringReader uring(opened_as);
    expect_layout(uring, s);
    CHECK(uring.files_registered());  // every part's descriptor is a fixed file
    io::PreadReader pread(opened_as);
    expect_layout(pread, s);
  }
  SUBCASE("uring, O_DIRECT where allowed") {
    io::UringReader reader(s.paths[1]);
    expect_exact(reader, s, Placement::zero_copy);
    expect_exact(reader, s, Placement::arbitrary);
    if (reader.direct()) CHECK(reader.stats().direct_ops > 0);
  }
  SUBCASE("uring, buffered") {
    io::UringOptions o;
    o.direct = false;
    io::UringReader reader(s.paths[2], o);
    expect_exact(reader, s, Placement::arbitrary);
  }
  SUBCASE("pread, synchronous and with workers") {
    io::PreadReader sync(s.paths[0]);
    expect_exact(sync, s, Placement::arbitrary);
    io::PreadReader workers(s.paths[0], io::PreadOptions{4, true});
    expect_exact(workers, s, Placement::arbitrary);
  }
}

TEST_CASE("read_sync across a part boundary returns both parts' bytes, and past the end names the last part") {
  SplitFiles s = make_split(disk_or_temp("split-sync"));
  auto opened = io::open_reader(s.paths[1]);
  io::Reader& r = *opened.reader;
  const auto parts = r.parts();
  const uint64_t at = parts[0].bytes - 1000;  // 1000 bytes before part 1's end, through the padding, into part 2
  std::vector<std::byte> got(parts[1].base + 1000 - at);
  r.read_sync(at, got);
  CHECK(std::memcmp(got.data(), s.space.data() + at, got.size()) == 0);
  std::vector<std::byte> past(10);
  try {
    r.read_sync(r.file_size() - 5, past);
    FAIL("a read past the end succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::io_error);
    CHECK(std::string(e.what()).find("past end of file") != std::string::npos);
  }
}

TEST_CASE("a split set with a missing part is refused with one message naming the part") {
  SplitFiles s = make_split(test::temp_dir("split-missing"));
  std::filesystem::remove(s.paths[1]);
  for (const std::string& opened_as : {s.paths[0], s.paths[2]}) {
    for (auto kind : {io::IoKind::uring, io::IoKind::pread}) {
      io::IoOptions o;
      o.kind = kind;
      try {
        io::open_reader(opened_as, o);
        FAIL("opened a set without part 2");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_file);
        const std::string m = e.what();
        CHECK(m.find("part 2 of 3") != std::string::npos);
        CHECK(m.find(s.paths[1]) != std::string::npos);
        CHECK(m.find("missing") != std::string::npos);
      }
    }
  }
}

TEST_CASE("whole_split_set = false opens only the named part") {
  SplitFiles s = make_split(test::temp_dir("split-one"));
  io::PreadOptions po;
  po.whole_split_set = false;
  io::PreadReader p(s.paths[1], po);
  CHECK(p.parts().size() == 1);
  CHECK(p.file_size() == kSizes[1]);
  io::UringOptions uo;
  uo.whole_split_set = false;
  io::UringReader u(s.paths[2], uo);
  CHECK(u.parts().size() == 1);
  CHECK(u.file_size() == kSizes[2]);
}
