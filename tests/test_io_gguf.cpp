// Real GGUF files through every IO backend: the parsed header is the same, and every tensor's
// bytes (32-byte aligned offsets, so mostly unaligned for O_DIRECT) arrive exactly.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/gguf/gguf.h"
#include "io/fault_reader.h"
#include "io/open_reader.h"
#include "io/pread_reader.h"
#include "io/uring_reader.h"
#include "tests/io_extent_check.h"
#include "tests/test_support.h"

using namespace sluice;

namespace {

std::vector<std::filesystem::path> tiny_models() {
  std::vector<std::filesystem::path> paths;
  auto root = test::reference_dir() / "tiny";
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return paths;
  for (const auto& arch : std::filesystem::directory_iterator(root, ec)) {
    if (!arch.is_directory()) continue;
    for (const auto& file : std::filesystem::directory_iterator(arch.path(), ec)) {
      if (file.path().extension() == ".gguf") paths.push_back(file.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

TEST_CASE("every tensor of the tiny GGUF models reads identically through uring, pread and a faulty reader") {
  auto models = tiny_models();
  REQUIRE_MESSAGE(!models.empty(), "no tiny GGUF models under " << test::reference_dir().string());
  for (const auto& path : models) {
    CAPTURE(path.string());
    auto file = test::read_file(path);
    io::PreadReader pread(path.string());
    core::GgufFile reference = core::GgufFile::parse(pread);

    io::FaultOptions faults;
    faults.seed = 3;
    faults.short_read_rate = 0.2;
    faults.eagain_rate = 0.1;
    faults.delay_rate = 0.2;
    std::unique_ptr<io::Reader> readers[] = {
        std::make_unique<io::UringReader>(path.string()),
        std::make_unique<io::FaultInjectingReader>(std::make_unique<io::UringReader>(path.string()), faults),
        std::make_unique<io::PreadReader>(path.string(), io::PreadOptions{4, true}),
    };
    for (auto& reader : readers) {
      CAPTURE(reader->backend());
      core::GgufFile parsed = core::GgufFile::parse(*reader);
      CHECK(parsed.metadata().size() == reference.metadata().size());
      CHECK(parsed.data_offset() == reference.data_offset());
      REQUIRE(parsed.tensors().size() == reference.tensors().size());
      std::vector<io::ReadRequest> extents;
      for (size_t i = 0; i < parsed.tensors().size(); ++i) {
        const auto& t = parsed.tensors()[i];
        CHECK(t.name == reference.tensors()[i].name);
        CHECK(t.file_offset == reference.tensors()[i].file_offset);
        extents.push_back(io::ReadRequest{t.file_offset, t.n_bytes, nullptr, i});
      }
      auto check = test::check_extents(*reader, file, extents, 32, test::Placement::arbitrary);
      CHECK(check.failed == 0);
      CHECK(check.mismatched == 0);
      CHECK(check.verified == extents.size());
    }
  }
}
