// libFuzzer target for the GGUF reader: any byte string must either parse or be rejected with
// sluice::Error, never crash, hang or allocate without bound. Seed with ../shared/reference/**.gguf.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/model_summary.h"
#include "io/reader.h"

namespace {

// Serves the fuzzer's bytes as a file. An even-length input is the whole file; an odd-length one
// is the head of a 1 TiB file (zeros after the input), so a header whose tensors lie beyond
// the input still reaches the model checks: scripts/fuzz_seeds.py makes such seeds.
class MemoryReader final : public sluice::io::Reader {
 public:
  MemoryReader(const uint8_t* data, size_t size)
      : data_(data), size_(size), file_size_(size % 2 ? size + (1ull << 40) : size) {}
  std::string_view backend() const override { return "memory"; }
  const std::string& path() const override { return path_; }
  uint64_t file_size() const override { return file_size_; }
  void submit(std::span<const sluice::io::ReadRequest>) override {}
  size_t reap(std::span<sluice::io::Completion>, size_t) override { return 0; }
  size_t in_flight() const override { return 0; }
  void read_sync(uint64_t offset, std::span<std::byte> dst) override {
    if (offset > file_size_ || dst.size() > file_size_ - offset) {
      throw sluice::Error(sluice::ErrorCode::io_error, "read past end");
    }
    // Past the input, the virtual file of an odd-length input reads as zeros.
    const size_t have = offset < size_ ? std::min<uint64_t>(dst.size(), size_ - offset) : 0;
    if (have) std::memcpy(dst.data(), data_ + offset, have);
    std::memset(dst.data() + have, 0, dst.size() - have);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  uint64_t file_size_;
  std::string path_ = "fuzz.gguf";
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemoryReader reader(data, size);
  try {
    // Tighter than the defaults (64 MiB strings, 2 GiB headers): an odd-length input's zero tail
    // would otherwise let one mutated length field cost seconds of copying (found as a timeout,
    // tests/fuzz/regressions/timeout-huge-key). test_gguf.cpp covers the default limits.
    sluice::core::GgufLimits limits;
    limits.max_string_bytes = 1u << 16;
    limits.max_header_bytes = 4u << 20;
    sluice::core::GgufFile file = sluice::core::GgufFile::parse(reader, limits);
    sluice::core::summarize(file);
    // The semantic checks a load runs before allocating anything (hyperparameters, shapes).
    sluice::core::ModelConfig config = sluice::core::ModelConfig::from_gguf(file);
    sluice::core::check_tensors(config, file);
  } catch (const sluice::Error&) {
  }
  return 0;
}
