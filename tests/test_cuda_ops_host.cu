// Host runs of the CUDA layer's per-element helpers against the CPU layer: rope angles
// (kernels/cuda/rope.cuh) and the router's selection order and weight normalization
// (kernels/cuda/route.cuh). Compiled by nvcc; no GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/llama/router.h"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/route.cuh"
#include "kernels/rope.h"
#include "kernels/topk.h"

namespace cd = sluice::kernels::cuda::detail;
using sluice::kernels::RopeMode;
using sluice::kernels::RopeParams;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// The top-k that a reduction under route_before yields: the k first of a sort by that order.
std::vector<int32_t> topk_by_order(const std::vector<float>& x, size_t k) {
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return cd::route_before(x[size_t(a)], a, x[size_t(b)], b); });
  idx.resize(k);
  return idx;
}

}  // namespace

TEST_CASE("cuda rope angles equal the CPU rope cache bit for bit (NORM, NEOX, YaRN)") {
  RopeParams plain;
  plain.n_dims = 128;
  plain.freq_base = 10000.0f;
  RopeParams neox = plain;
  neox.mode = RopeMode::neox;
  neox.n_dims = 64;
  neox.freq_base = 1000000.0f;
  RopeParams yarn;  // deepseek2-like: 64 rotated dims, YaRN factor 40
  yarn.n_dims = 64;
  yarn.n_ctx_orig = 4096;
  yarn.freq_base = 10000.0f;
  yarn.freq_scale = 1.0f / 40.0f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 1.0f;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  for (const RopeParams& p : {plain, neox, yarn}) {
    const cd::RopeArgs a = cd::rope_args(p);
    std::vector<float> cache(size_t(p.n_dims));
    for (int64_t pos : {0, 1, 7, 100, 4095, 65000}) {
      sluice::kernels::rope_cache(p, pos, cache);
      for (int i0 = 0; i0 < p.n_dims; i0 += 2) {
        float c, s;
        cd::rope_cos_sin(a, pos, i0, &c, &s);
        INFO("n_dims " << p.n_dims << " pos " << pos << " pair " << i0 / 2);
        CHECK(same_bits(c, cache[size_t(i0)]));
        CHECK(same_bits(s, cache[size_t(i0) + 1]));
      }
    }
  }
  // Pairing: NORM rotates (2i, 2i+1), NEOX (i, i + n_dims/2).
  int a = 0, b = 0;
  cd::rope_pair(cd::rope_args(plain), 6, &a, &b);
  CHECK((a == 6 && b == 7));
  cd::rope_pair(cd::rope_args(neox), 6, &a, &b);
  CHECK((a == 3 && b == 35));
}

TEST_CASE("cuda router selection order picks what the CPU top-k picks, ties and NaN included") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coarse(0, 9);  // few distinct values: many ties
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = size_t(8 + trial % 120);
    std::vector<float> x(n);
    for (auto& v : x) v = float(coarse(rng)) * 0.25f;
    if (trial % 3 == 0) x[size_t(trial) % n] = nan;
    if (trial % 5 == 0) x[size_t(trial * 7) % n] = -inf;
    if (trial % 7 == 0) std::fill(x.begin(), x.end(), nan);
    const size_t k = 1 + size_t(trial) % std::min<size_t>(n, 16);
    std::vector<int32_t> cpu(k);
    sluice::kernels::top_k(x, cpu);
    INFO("trial " << trial);
    CHECK(topk_by_order(x, k) == cpu);
  }
}

TEST_CASE("cuda router weights equal route_token's for softmax and sigmoid gating") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 40; ++trial) {
    sluice::core::RouterParams p;
    p.gating = trial % 2 ? sluice::core::GatingFunc::sigmoid : sluice::core::GatingFunc::softmax;
    p.n_expert = 64 + trial;
    p.n_expert_used = 1 + trial % 8;
    p.norm = trial % 3 != 0;
    p.scale_on = trial % 4 == 0;
    p.scale = 2.5f;
    std::vector<float> logits(size_t(p.n_expert)), bias(size_t(p.n_expert));
    for (auto& v : logits) v = normal(rng);
    for (auto& v : bias) v = 0.1f * normal(rng);
    std::vector<int32_t> ids(size_t(p.n_expert_used)), groups(1);
    std::vector<float> w(size_t(p.n_expert_used)), scratch(p.scratch_floats());
    sluice::core::route_token(p, logits, bias, ids, w, groups, scratch);
    const std::vector<float> probs(scratch.begin(), scratch.begin() + p.n_expert);  // route_token's probs
    std::vector<float> sel(size_t(p.n_expert));
    for (size_t i = 0; i < sel.size(); ++i) sel[i] = probs[i] + bias[i];
    const auto chosen = topk_by_order(sel, size_t(p.n_expert_used));
    INFO("trial " << trial);
    CHECK(chosen == ids);
    std::vector<float> wc(size_t(p.n_expert_used));
    cd::route_weights(probs.data(), chosen.data(), int(chosen.size()), p.norm, p.scale_on ? p.scale : 1.0f, wc.data());
    for (size_t i = 0; i < w.size(); ++i) CHECK(same_bits(wc[i], w[i]));
  }
}
