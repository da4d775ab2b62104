// io::FileMapping: the files of a reader's address space mapped read-only, each at its part's base.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/file_mapping.h"
#include "io/split_set.h"
#include "tests/test_support.h"

using sluice::io::FileMapping;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

bool equal(std::span<const std::byte> view, const std::vector<uint8_t>& bytes, size_t at) {
  return view.size() <= bytes.size() - at && std::memcmp(view.data(), bytes.data() + at, view.size()) == 0;
}

}  // namespace

TEST_CASE("a mapping gives each part's bytes at its base, and no view across parts or past the end") {
  const auto dir = sluice::test::ScopedTempDir("file-mapping");
  const auto a = pattern(3 * 4096 + 100, 1), b = pattern(5000, 2);
  sluice::test::write_file(dir.path() / "a.bin", a);
  sluice::test::write_file(dir.path() / "b.bin", b);
  const sluice::io::PartMap space({(dir.path() / "a.bin").string(), (dir.path() / "b.bin").string()}, {a.size(), b.size()});
  const uint64_t b_base = space.parts()[1].base;
  REQUIRE(b_base == 4 * 4096);  // the next 4 KiB boundary after part a

  const FileMapping m(space.parts());
  auto v = m.view(10, 5000);
  REQUIRE(v.size() == 5000);
  CHECK(equal(v, a, 10));
  m.populate(v);
  CHECK(equal(v, a, 10));
  v = m.view(b_base + 123, b.size() - 123);  // the whole tail of part b
  REQUIRE(v.size() == b.size() - 123);
  CHECK(equal(v, b, 123));

  CHECK(m.view(a.size() - 10, 20).empty());       // runs past part a into the padding
  CHECK(m.view(a.size() + 10, 4).empty());        // inside the padding between parts
  CHECK(m.view(b_base + b.size() - 1, 2).empty());  // past the end of the space
  CHECK(m.view(b_base + b.size(), 1).empty());

  // A dropped view reads the same bytes again (from the disk or the page cache).
  m.drop(v);
  m.populate(v);
  CHECK(equal(v, b, 123));
}

TEST_CASE("mapping a file that does not exist is an io_error naming it") {
  const auto dir = sluice::test::ScopedTempDir("file-mapping-missing");
  const std::string path = (dir.path() / "nope.gguf").string();
  try {
    FileMapping m({{path, 0, 4096}});
    FAIL("no error");
  } catch (const sluice::Error& e) {
    CHECK(e.code() == sluice::ErrorCode::io_error);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}
