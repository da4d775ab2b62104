// Helpers for the kernel suites: reading reference tensors from GGUF files, hashing dequantized
// values as ggml's reference data does, and seeded random rows.
#pragma once

#include <openssl/evp.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "io/pread_reader.h"
#include "kernels/quant.h"
#include "tests/test_support.h"

namespace sluice::test {

inline std::filesystem::path kernels_dir() { return reference_dir() / "kernels"; }

inline nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(read_text(path));
}

// One tensor's raw bytes, as stored in the file.
inline std::vector<std::byte> read_tensor_bytes(io::Reader& reader, const core::GgufTensorInfo& t) {
  std::vector<std::byte> bytes(t.n_bytes);
  reader.read_sync(t.file_offset, bytes);
  return bytes;
}

// Dequantizes a whole tensor row by row (rows of ne[0] values).
inline std::vector<float> dequantize_tensor(const core::GgufTensorInfo& t,
                                            const std::vector<std::byte>& bytes) {
  std::vector<float> out(t.n_elements);
  const int64_t n_cols = t.ne[0];
  const uint64_t n_rows = t.n_elements / uint64_t(n_cols);
  for (uint64_t r = 0; r < n_rows; ++r)
    kernels::dequantize_row(t.type, bytes.data() + r * t.row_bytes, out.data() + r * uint64_t(n_cols),
                            n_cols);
  return out;
}

// SHA-256 (lower-case hex) of the values as little-endian f32 bytes (x86 is little-endian).
inline std::string sha256_f32le(const std::vector<float>& values) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(values.data(), values.size() * sizeof(float), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  char buf[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    hex += buf;
  }
  return hex;
}

// Activation-like values: mostly N(0,1) with a few large outliers, as real hidden states have.
inline std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = unit(rng) < 0.01f ? normal(rng) * 8.0f : normal(rng);
  return v;
}

inline double rms(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / double(a.size()));
}

}  // namespace sluice::test
