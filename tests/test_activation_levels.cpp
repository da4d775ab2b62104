// silu/swiglu's 16-value blocks (ggml_v_expf) give the scalar emulation's bits at every kernel
// level the CPU runs, over every branch of ggml_v_expf: the polynomial, results that are
// subnormal (exp(-g) below 2^-126, the ldexp/scalef path), |n| > 192 (exact 0 or infinity),
// infinities and signed zeros. A NaN result must be a NaN at every level (its payload may differ).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/activations.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"

using sluice::kernels::cpu::KernelTable;

namespace {

bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0; }

// Gate values covering ggml_v_expf's branches for exp(-g), in a length that is a multiple of 16.
std::vector<float> gate_values() {
  std::vector<float> g;
  for (float v = -300.0f; v <= 300.0f; v += 0.173f) g.push_back(v);    // all three branches
  for (float v = 85.0f; v <= 106.0f; v += 0.0371f) g.push_back(v);     // subnormal exp(-g)
  for (float v = -1.0f; v <= 1.0f; v += 0.00191f) g.push_back(v);      // the polynomial near 0
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::denorm_min(), -1e-40f,
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 88.72f, -88.72f,
                  103.97f, -103.97f, 192.5f * 0.6931472f, -192.5f * 0.6931472f})
    g.push_back(v);
  while (g.size() % 16 != 0) g.push_back(0.5f);
  return g;
}

}  // namespace

TEST_CASE("silu and swiglu blocks equal the scalar ggml_v_expf emulation bit for bit at every kernel level") {
  const std::vector<float> g = gate_values();
  std::vector<float> up(g.size());
  for (size_t i = 0; i < up.size(); ++i) up[i] = std::sin(0.7f * float(i)) * 3.0f;
  std::vector<float> silu_ref(g.size()), swiglu_ref(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    silu_ref[i] = g[i] / (1.0f + sluice::kernels::detail::ggml_v_expf(0.0f - g[i]));
    swiglu_ref[i] = silu_ref[i] * up[i];
  }
  for (const KernelTable* level : sluice::kernels::cpu::kernel_levels()) {
    INFO("kernel level " << level->isa);
    REQUIRE(bool(level->silu_blocks));
    REQUIRE(bool(level->swiglu_blocks));
    std::vector<float> y(g.size());
    level->silu_blocks(g.data(), y.data(), g.size());
    int silu_diff = 0, swiglu_diff = 0;
    for (size_t i = 0; i < g.size(); ++i) silu_diff += !same(y[i], silu_ref[i]);
    level->swiglu_blocks(g.data(), up.data(), y.data(), g.size());
    for (size_t i = 0; i < g.size(); ++i) swiglu_diff += !same(y[i], swiglu_ref[i]);
    CHECK(silu_diff == 0);
    CHECK(swiglu_diff == 0);
    // In place: y is the gate (the session's swiglu writes over its gate buffer).
    std::vector<float> in_place = g;
    level->swiglu_blocks(in_place.data(), up.data(), in_place.data(), g.size());
    int in_place_diff = 0;
    for (size_t i = 0; i < g.size(); ++i) in_place_diff += !same(in_place[i], swiglu_ref[i]);
    CHECK(in_place_diff == 0);
  }
}

TEST_CASE("swiglu and silu take ggml_v_expf for whole 16-value blocks and libm expf for the tail") {
  // 37 values: two blocks and a 5-value tail.
  std::vector<float> g(37), up(37, 1.0f), y(37), s(37);
  for (size_t i = 0; i < g.size(); ++i) g[i] = -4.0f + 0.23f * float(i);
  sluice::kernels::swiglu(g, up, y);
  sluice::kernels::silu(g, s);
  for (size_t i = 0; i < g.size(); ++i) {
    const float e = i < 32 ? sluice::kernels::detail::ggml_v_expf(0.0f - g[i]) : std::exp(-g[i]);
    const float want = g[i] / (1.0f + e);
    INFO("value " << i);
    CHECK(same(y[i], want));
    CHECK(same(s[i], want));
  }
}
