// Streamed layers are checked against the model's index like experts: a byte changed in a
// block's tensor after indexing is caught on landing, naming the tensor.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/engine.h"
#include "core/gguf/gguf.h"
#include "core/gguf/shard_index.h"
#include "io/pread_reader.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::core::Engine;
using sluice::core::EngineOptions;

namespace {

EngineOptions at_minimum(const fs::path& model) {
  EngineOptions o;
  o.model_path = model.string();
  o.session.n_ctx = 64;
  o.session.kv_type = sluice::GgmlType::F32;
  o.io.kind = sluice::io::IoKind::pread;
  uint64_t minimum = 0;
  {
    Engine e(o);
    minimum = e.budget().minimum();
  }
  o.budget_bytes = minimum;
  return o;
}

}  // namespace

TEST_CASE("a streamed layer whose bytes changed after indexing is rejected on landing, naming the tensor") {
  // The llama family and kimi-k3 stream their blocks through the same stream (core/layers).
  for (const char* stem : {"tiny/deepseek2/deepseek2-q4_k_m", "kimi-k3/kimi-k3-q4_k_m"}) {
    CAPTURE(stem);
    auto dir = sluice::test::temp_dir("layer-digests");
    const fs::path model = dir / fs::path(stem).filename().replace_extension(".gguf");
    fs::copy_file(sluice::test::reference_dir() / (std::string(stem) + ".gguf"), model);
    fs::permissions(model, fs::perms::owner_read | fs::perms::owner_write);
    uint64_t offset = 0;
    {
      sluice::io::PreadReader reader(model.string());
      sluice::core::GgufFile file = sluice::core::GgufFile::parse(reader);
      sluice::core::ShardIndex::build(file, reader).save(model);
      offset = file.tensor("blk.1.attn_output.weight").file_offset + 7;
    }
    const int32_t token = 100;
    // The minimum is measured on the intact file: a plain (in-core) open of the corrupted one
    // would refuse the tensor while loading it, before anything streams.
    const EngineOptions minimum = at_minimum(model);
    {
      Engine e(minimum);
      REQUIRE(e.layer_cache() != nullptr);
      CHECK(e.verifying());
      CHECK_NOTHROW(e.forward({&token, 1}, 0));
    }
    // Change one byte of a streamed tensor and put the mtime back, so the index still claims to
    // describe the file: only the digest can tell.
    struct stat st {};
    REQUIRE(::stat(model.c_str(), &st) == 0);
    {
      std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(offset));
      const char old = static_cast<char>(f.get());
      f.seekp(static_cast<std::streamoff>(offset));
      f.put(static_cast<char>(old ^ 0x20));
    }
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    REQUIRE(::utimensat(AT_FDCWD, model.c_str(), times, 0) == 0);
    Engine e(minimum);
    REQUIRE(e.verifying());
    try {
      e.forward({&token, 1}, 0);
      FAIL("a corrupted layer was used");
    } catch (const sluice::Error& err) {
      CHECK(err.code() == sluice::ErrorCode::corrupt_data);
      CHECK(std::string(err.what()).find("blk.1.attn_output.weight") != std::string::npos);
    }
  }
}
