// The CUDA layer's per-type dequantizers (kernels/cuda/dequant_*.cuh) run on the CPU here and
// must reproduce kernels::dequantize_row bit for bit on random blocks of every weight type: this
// checks their index math without a GPU. (Compiled by nvcc: the helpers are __host__ __device__.)
// The i-quants and ternary types have their own suite, on ggml's reference tensors too:
// tests/test_cuda_iquant_host.cu.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cuda/dequant_float.cuh"
#include "kernels/cuda/dequant_kquants.cuh"
#include "kernels/cuda/dequant_legacy.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/quant.h"

using sluice::GgmlType;
namespace dq = sluice::kernels::cuda::dq;

namespace {

// A random finite half (any exponent but 31: normals, subnormals and zeros of both signs).
uint16_t random_half(std::mt19937& rng) {
  for (;;) {
    const auto h = uint16_t(rng());
    if (((h >> 10) & 0x1f) != 0x1f) return h;
  }
}

// Random bytes for n_blocks blocks, with the f16 fields (at `half_offsets` in each block) finite.
std::vector<uint8_t> random_blocks(std::mt19937& rng, int n_blocks, int block_bytes,
                                   std::initializer_list<int> half_offsets) {
  std::vector<uint8_t> bytes(size_t(n_blocks) * size_t(block_bytes));
  for (auto& b : bytes) b = uint8_t(rng());
  for (int i = 0; i < n_blocks; ++i)
    for (int off : half_offsets) {
      const uint16_t h = random_half(rng);
      std::memcpy(&bytes[size_t(i) * size_t(block_bytes) + size_t(off)], &h, 2);
    }
  return bytes;
}

// Every run() of every block against the CPU layer's dequantize_row, compared as bits.
template <class D>
void check_type(GgmlType type, const std::vector<uint8_t>& bytes) {
  INFO("type " << sluice::ggml_type_name(type));
  const auto& traits = sluice::ggml_traits(type);
  REQUIRE((traits.type_size == uint32_t(D::kBytes)));
  REQUIRE((traits.block_size == uint32_t(D::kQK)));
  const int64_t n_blocks = int64_t(bytes.size()) / D::kBytes;
  const int64_t n = n_blocks * D::kQK;
  std::vector<float> ref(static_cast<size_t>(n));
  sluice::kernels::dequantize_row(type, reinterpret_cast<const std::byte*>(bytes.data()), ref.data(), n);
  int mismatches = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int j = 0; j < D::kQK / D::kRun; ++j) {
      float out[D::kRun];
      D::run(bytes.data() + b * D::kBytes, j, out);
      for (int r = 0; r < D::kRun; ++r) {
        const float expect = ref[size_t(b * D::kQK + j * D::kRun + r)];
        if (std::memcmp(&out[r], &expect, 4) != 0 && ++mismatches <= 5)
          FAIL_CHECK("block " << b << " value " << j * D::kRun + r << ": " << out[r] << " != " << expect);
      }
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("cuda dequantizers reproduce the CPU layer bit for bit on random blocks of every type") {
  std::mt19937 rng(1234);
  constexpr int kBlocks = 64;
  {
    std::vector<uint8_t> f32(4 * 1000);
    std::uniform_real_distribution<float> u(-100.0f, 100.0f);
    for (size_t i = 0; i < f32.size(); i += 4) {
      const float v = u(rng);
      std::memcpy(&f32[i], &v, 4);
    }
    check_type<dq::F32>(GgmlType::F32, f32);
  }
  {
    std::vector<uint8_t> f16(2 * 1001);
    for (size_t i = 0; i < f16.size(); i += 2) {
      const uint16_t h = random_half(rng);
      std::memcpy(&f16[i], &h, 2);
    }
    check_type<dq::F16>(GgmlType::F16, f16);
    check_type<dq::BF16>(GgmlType::BF16, f16);  // any 16 bits are a bf16; these are finite too
  }
  check_type<dq::Q4_0>(GgmlType::Q4_0, random_blocks(rng, kBlocks, 18, {0}));
  check_type<dq::Q4_1>(GgmlType::Q4_1, random_blocks(rng, kBlocks, 20, {0, 2}));
  check_type<dq::Q5_0>(GgmlType::Q5_0, random_blocks(rng, kBlocks, 22, {0}));
  check_type<dq::Q5_1>(GgmlType::Q5_1, random_blocks(rng, kBlocks, 24, {0, 2}));
  check_type<dq::Q8_0>(GgmlType::Q8_0, random_blocks(rng, kBlocks, 34, {0}));
  check_type<dq::MXFP4>(GgmlType::MXFP4, random_blocks(rng, kBlocks, 17, {}));
  check_type<dq::IQ4_NL>(GgmlType::IQ4_NL, random_blocks(rng, kBlocks, 18, {0}));
  check_type<dq::Q2_K>(GgmlType::Q2_K, random_blocks(rng, kBlocks, 84, {80, 82}));
  check_type<dq::Q3_K>(GgmlType::Q3_K, random_blocks(rng, kBlocks, 110, {108}));
  check_type<dq::Q4_K>(GgmlType::Q4_K, random_blocks(rng, kBlocks, 144, {0, 2}));
  check_type<dq::Q5_K>(GgmlType::Q5_K, random_blocks(rng, kBlocks, 176, {0, 2}));
  check_type<dq::Q6_K>(GgmlType::Q6_K, random_blocks(rng, kBlocks, 210, {208}));
}

TEST_CASE("cuda matvec supports exactly the weight types the CPU layer computes on") {
  // The i-quants and ternary types included (their dequantizers: tests/test_cuda_iquant_host.cu).
  for (uint32_t id = 0; id < 64; ++id) {
    const auto traits = sluice::ggml_type_traits(id);
    if (!traits) continue;
    INFO("type " << traits->name);
    CHECK(sluice::kernels::cuda::is_supported(traits->type) == sluice::kernels::is_supported(traits->type));
  }
}
