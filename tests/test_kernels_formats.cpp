// The scalar number-format conversions that every kernel relies on agree with the hardware
// (F16C) and with ggml's definitions, including subnormals, ties and overflow.
#include <doctest/doctest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "kernels/cpu/blocks.h"

namespace cpu = sluice::kernels::cpu;

namespace {

bool cpu_has_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c");
}

__attribute__((target("f16c"))) uint16_t hw_f32_to_fp16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_fp16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace

TEST_CASE("every f16 value widens to the same f32 bits as F16C") {
  if (!cpu_has_f16c()) return;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = cpu::fp16_to_f32(uint16_t(h)), b = hw_fp16_to_f32(uint16_t(h));
    if (std::isnan(b)) {
      REQUIRE(std::isnan(a));
    } else {
      REQUIRE(std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b));
    }
  }
}

TEST_CASE("f32 to f16 rounds to nearest even exactly as F16C does, subnormals and overflow included") {
  if (!cpu_has_f16c()) return;
  std::mt19937 rng(7);
  // Random bit patterns across the whole f32 range, then values near every f16 rounding boundary.
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()));
    if (std::isnan(f)) continue;
    REQUIRE(cpu::f32_to_fp16(f) == hw_f32_to_fp16(f));
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const uint32_t bits = std::bit_cast<uint32_t>(cpu::fp16_to_f32(uint16_t(h)));
    for (int32_t delta : {-4097, -4096, -4095, -1, 0, 1, 4095, 4096, 4097}) {
      const float f = std::bit_cast<float>(uint32_t(int64_t(bits) + delta));
      if (std::isnan(f)) continue;
      REQUIRE(cpu::f32_to_fp16(f) == hw_f32_to_fp16(f));
      REQUIRE(cpu::f32_to_fp16(-f) == hw_f32_to_fp16(-f));
    }
  }
  CHECK(cpu::f32_to_fp16(65520.0f) == 0x7c00);  // the tie above the largest finite value -> inf
  CHECK(cpu::f32_to_fp16(65519.0f) == 0x7bff);
}

TEST_CASE("bf16 rounding and E8M0 scales follow ggml's definitions") {
  CHECK(cpu::f32_to_bf16(1.0f) == 0x3f80);
  CHECK(cpu::f32_to_bf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(cpu::f32_to_bf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(cpu::f32_to_bf16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK((cpu::f32_to_bf16(std::nanf("")) & 0x7fc0) == 0x7fc0);
  CHECK(cpu::bf16_to_f32(0xc000) == -2.0f);
  // E8M0 halved: e = 127 is 2^0 / 2; e = 0 and 1 are f32 subnormals.
  CHECK(cpu::e8m0_to_f32_half(127) == 0.5f);
  CHECK(cpu::e8m0_to_f32_half(128) == 1.0f);
  CHECK(cpu::e8m0_to_f32_half(1) == std::ldexp(1.0f, -127));
  CHECK(cpu::e8m0_to_f32_half(0) == std::ldexp(1.0f, -128));
  CHECK(cpu::e8m0_to_f32_half(254) == std::ldexp(1.0f, 126));
}
