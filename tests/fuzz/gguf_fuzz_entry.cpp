#include "tests/fuzz/gguf_fuzz_entry.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/kimi_k3/kimi_k3_config.h"
#include "core/llama/model_config.h"
#include "core/gguf/model_summary.h"
#include "io/reader.h"

namespace sluice::fuzz {

namespace {

// Serves the fuzzer's bytes as a file (see the header for odd and even lengths).
class MemoryReader final : public io::Reader {
 public:
  MemoryReader(const uint8_t* data, size_t size)
      : data_(data), size_(size), file_size_(size % 2 ? size + (1ull << 40) : size) {}
  std::string_view backend() const override { return "memory"; }
  const std::string& path() const override { return path_; }
  uint64_t file_size() const override { return file_size_; }
  void submit(std::span<const io::ReadRequest>) override {}
  size_t reap(std::span<io::Completion>, size_t) override { return 0; }
  size_t in_flight() const override { return 0; }
  void read_sync(uint64_t offset, std::span<std::byte> dst) override {
    if (offset > file_size_ || dst.size() > file_size_ - offset) throw Error(ErrorCode::io_error, "read past end");
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

void gguf_one_input(const uint8_t* data, size_t size) {
  MemoryReader reader(data, size);
  try {
    const core::GgufFile file = core::GgufFile::parse(reader, core::GgufLimits{});
    core::summarize(file);
    if (file.architecture() == "kimi-k3") {
      const core::KimiK3Config config = core::KimiK3Config::from_gguf(file);
      core::check_kimi_k3_tensors(config, file);
    } else {
      const core::ModelConfig config = core::ModelConfig::from_gguf(file);
      core::check_tensors(config, file);
    }
  } catch (const Error&) {
  }
}

}  // namespace sluice::fuzz
