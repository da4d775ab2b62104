// Files for the io tests: deterministic contents, and a directory on a disk-backed file system
// (O_DIRECT needs one; /tmp may be tmpfs). Header-only, shared by tests/test_io_*.cpp.
#pragma once

#include <sys/vfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice::test {

inline std::vector<uint8_t> pattern_bytes(uint64_t size, uint64_t seed) {
  std::vector<uint8_t> bytes(size);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(bytes.data() + i, &v, 8);
  }
  for (; i < size; ++i) bytes[i] = static_cast<uint8_t>(rng());
  return bytes;
}

inline bool is_tmpfs(const std::filesystem::path& dir) {
  struct statfs st {};
  return ::statfs(dir.c_str(), &st) == 0 && st.f_type == 0x01021994;  // TMPFS_MAGIC
}

// A fresh directory next to the build (under /work in CI), else under the temp area when that is
// not tmpfs; empty path when neither is disk backed (O_DIRECT tests then skip).
inline std::filesystem::path disk_dir(const std::string& name) {
  static int counter = 0;
  std::filesystem::path candidates[] = {std::filesystem::path(SLUICE_BINARY).parent_path(),
                                        std::filesystem::temp_directory_path()};
  for (const auto& base : candidates) {
    std::error_code ec;
    if (base.empty() || !std::filesystem::is_directory(base, ec) || is_tmpfs(base)) continue;
    auto dir = base / ("io-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name);
    std::filesystem::remove_all(dir, ec);
    if (std::filesystem::create_directories(dir, ec)) return dir;
  }
  return {};
}

// Removes the directory when the test ends.
struct ScopedDir {
  std::filesystem::path path;
  explicit ScopedDir(std::filesystem::path p) : path(std::move(p)) {}
  ~ScopedDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace sluice::test
