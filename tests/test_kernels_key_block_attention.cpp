// The key-block attention kernels (kernels/key_block_attention.h): every level computes each
// output as the fma chain the header defines, bit for bit (the chains are written out here once,
// independently of the kernels' bodies), and the online softmax over chunks with the weighted
// values is attention: within float rounding of a double-precision softmax over the whole row.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/expf_ggml.h"
#include "kernels/key_block_attention.h"

using sluice::kernels::cpu::KernelTable;
namespace cpu = sluice::kernels::cpu;

namespace {

float wave(int64_t i, float phase) { return std::sin(0.37f * float(i) + phase) * (1.0f + 0.01f * float(i % 7)); }
uint16_t f16(float x) { return cpu::f32_to_fp16(x); }
float f32(uint16_t h) { return cpu::fp16_to_f32(h); }
bool same(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

}  // namespace

TEST_CASE("every level decompresses keys and values as the header's fma chains, bit for bit") {
  // 3 blocks (the 2-block tile and a tail), 70 inputs, 13 key channels (an 8-channel tile and a
  // tail), 80 value channels (a 64-channel tile and a 16 tail), 45 cells (4-cell tiles and a tail).
  constexpr int64_t n_blocks = 3, n_in = 70, dk = 13, dv = 80, n_cells = 45, wt_stride = 100;
  std::vector<float> lt(size_t(n_blocks * n_in * 16)), wt(size_t(n_in * wt_stride));
  for (size_t i = 0; i < lt.size(); ++i) lt[i] = wave(int64_t(i), 0.3f);
  for (size_t i = 0; i < wt.size(); ++i) wt[i] = 0.05f * wave(int64_t(i), 1.9f);
  const size_t kt_stride = size_t(dk * 16) + 32;  // padding a kernel must not write
  std::vector<uint16_t> want_k(size_t(n_blocks) * kt_stride, 0x7e00), want_v(size_t(n_cells * 96), 0x7e00);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t c = 0; c < 16; ++c) {
        float acc = 0.0f;
        for (int64_t l = 0; l < n_in; ++l) acc = std::fma(wt[size_t(l * wt_stride + i)], lt[size_t((b * n_in + l) * 16 + c)], acc);
        want_k[size_t(b) * kt_stride + size_t(i * 16 + c)] = f16(acc);
      }
  for (int64_t j = 0; j < n_cells; ++j)
    for (int64_t i = 0; i < dv; ++i) {
      float acc = 0.0f;
      for (int64_t l = 0; l < n_in; ++l)
        acc = std::fma(lt[size_t(((j / 16) * n_in + l) * 16 + j % 16)], wt[size_t(l * wt_stride + 10 + i)], acc);
      want_v[size_t(j * 96 + i)] = f16(acc);
    }
  for (const KernelTable* t : cpu::kernel_levels()) {
    INFO("level " << std::string(t->isa));
    REQUIRE(bool(t->key_blocks.decompress_keys));
    std::vector<uint16_t> kt(want_k.size(), 0x7e00), v(want_v.size(), 0x7e00);
    t->key_blocks.decompress_keys(lt.data(), n_blocks, n_in, wt.data(), wt_stride, dk, kt.data(), kt_stride);
    t->key_blocks.decompress_values(lt.data(), n_cells, n_in, wt.data() + 10, wt_stride, dv, v.data(), 96);
    CHECK(same(kt.data(), want_k.data(), kt.size() * 2));
    CHECK(same(v.data(), want_v.data(), v.size() * 2));
  }
}

TEST_CASE("every level scores key blocks, steps the online softmax and sums weighted values as the header says") {
  constexpr int64_t n_blocks = 5, d = 35, n_cells = 37, dv = 80;
  constexpr int n_q = 11;  // an 8-row score tile, 4-row value tiles, and tails
  const size_t kt_stride = size_t(d * 16) + 16;
  std::vector<uint16_t> kt(size_t(n_blocks) * kt_stride), v(size_t(n_cells * dv));
  for (size_t i = 0; i < kt.size(); ++i) kt[i] = f16(wave(int64_t(i), 0.7f));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f16(wave(int64_t(i), 2.2f));
  std::vector<std::vector<float>> q(n_q, std::vector<float>(d)), w(n_q, std::vector<float>(n_cells));
  for (int r = 0; r < n_q; ++r) {
    for (int64_t i = 0; i < d; ++i) q[size_t(r)][size_t(i)] = wave(i, 0.9f * float(r));
    for (int64_t j = 0; j < n_cells; ++j) w[size_t(r)][size_t(j)] = 0.1f * wave(j, 1.3f * float(r));
  }
  const float scale = 0.125f;
  std::vector<std::vector<float>> want_s(n_q, std::vector<float>(n_blocks * 16)), want_o(n_q, std::vector<float>(dv));
  for (int r = 0; r < n_q; ++r) {
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int64_t c = 0; c < 16; ++c) {
        float acc = 0.0f;
        for (int64_t i = 0; i < d; ++i) acc = std::fma(f32(kt[size_t(b) * kt_stride + size_t(i * 16 + c)]), q[size_t(r)][size_t(i)], acc);
        want_s[size_t(r)][size_t(b * 16 + c)] = scale * acc;
      }
    for (int64_t i = 0; i < dv; ++i) {
      float acc = 0.5f * float(i % 3);  // the sums continue from the outputs' values
      for (int64_t j = 0; j < n_cells; ++j) acc = std::fma(f32(v[size_t(j * dv + i)]), w[size_t(r)][size_t(j)], acc);
      want_o[size_t(r)][size_t(i)] = acc;
    }
  }
  // The softmax step on a row of 37 scores after a chunk whose maximum was 1.5 (sum lanes 1..16).
  std::vector<float> s0(37), want_e(37);
  for (size_t j = 0; j < s0.size(); ++j) s0[j] = 3.0f * wave(int64_t(j), 0.4f);
  float want_max = 1.5f, want_lanes[16];
  for (int c = 0; c < 16; ++c) want_lanes[c] = float(c + 1);
  for (float x : s0) want_max = std::max(want_max, x);
  const float want_alpha = sluice::kernels::detail::ggml_v_expf(1.5f - want_max);
  for (float& l : want_lanes) l *= want_alpha;
  for (size_t j = 0; j < s0.size(); ++j) {
    want_e[j] = sluice::kernels::detail::ggml_v_expf(s0[j] - want_max);
    want_lanes[j % 16] += want_e[j];
  }
  for (const KernelTable* t : cpu::kernel_levels()) {
    INFO("level " << std::string(t->isa));
    std::vector<std::vector<float>> s(n_q, std::vector<float>(n_blocks * 16)), o(n_q, std::vector<float>(dv));
    std::vector<const float*> qp, wp;
    std::vector<float*> sp, op;
    for (int r = 0; r < n_q; ++r) {
      for (int64_t i = 0; i < dv; ++i) o[size_t(r)][size_t(i)] = 0.5f * float(i % 3);
      qp.push_back(q[size_t(r)].data());
      wp.push_back(w[size_t(r)].data());
      sp.push_back(s[size_t(r)].data());
      op.push_back(o[size_t(r)].data());
    }
    t->key_blocks.scores(kt.data(), kt_stride, n_blocks, d, qp.data(), n_q, scale, sp.data());
    t->key_blocks.add_weighted(v.data(), dv, n_cells, dv, wp.data(), n_q, op.data());
    for (int r = 0; r < n_q; ++r) {
      CHECK(same(s[size_t(r)].data(), want_s[size_t(r)].data(), want_s[size_t(r)].size() * 4));
      CHECK(same(o[size_t(r)].data(), want_o[size_t(r)].data(), want_o[size_t(r)].size() * 4));
    }
    std::vector<float> e = s0;
    float max = 1.5f, lanes[16];
    for (int c = 0; c < 16; ++c) lanes[c] = float(c + 1);
    const float alpha = t->key_blocks.softmax_chunk(e.data(), int64_t(e.size()), &max, lanes);
    CHECK(same(&alpha, &want_alpha, 4));
    CHECK(same(&max, &want_max, 4));
    CHECK(same(lanes, want_lanes, sizeof lanes));
    CHECK(same(e.data(), want_e.data(), e.size() * 4));
    // A first chunk: alpha 0, the lanes start from 0 whatever they held.
    float first_max = -std::numeric_limits<float>::infinity(), first_lanes[16] = {};
    CHECK(t->key_blocks.softmax_chunk(e.data(), 5, &first_max, first_lanes) == 0.0f);
  }
}

TEST_CASE("an online softmax over chunks of key blocks with its weighted values is attention over the whole row") {
  // One query over 600 cells in chunks of 256 (the session's), against a double-precision softmax.
  constexpr int64_t d = 48, dv = 32, n_cells = 600, chunk = 256;
  const int64_t n_blocks = (n_cells + 15) / 16;
  const size_t kt_stride = size_t(d * 16);
  std::vector<uint16_t> kt(size_t(n_blocks) * kt_stride), v(size_t(n_cells * dv));
  for (size_t i = 0; i < kt.size(); ++i) kt[i] = f16(wave(int64_t(i), 0.1f));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f16(wave(int64_t(i), 1.1f));
  std::vector<float> q(d);
  for (int64_t i = 0; i < d; ++i) q[size_t(i)] = 0.8f * wave(i, 2.0f);
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<double> p(n_cells);
  double mx = -1e300, sum = 0.0;
  for (int64_t j = 0; j < n_cells; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < d; ++i) acc += double(f32(kt[size_t(j / 16) * kt_stride + size_t(i * 16 + j % 16)])) * q[size_t(i)];
    p[size_t(j)] = acc * scale;
    mx = std::max(mx, p[size_t(j)]);
  }
  for (double& x : p) sum += (x = std::exp(x - mx));
  std::vector<float> out(dv, 0.0f), scores(chunk);
  float max = -std::numeric_limits<float>::infinity();
  std::array<float, 16> lanes{};
  const float* qp[1] = {q.data()};
  for (int64_t c0 = 0; c0 < n_cells; c0 += chunk) {
    const int64_t n = std::min(chunk, n_cells - c0);
    float* sp[1] = {scores.data()};
    sluice::kernels::key_block_scores(kt.data() + size_t(c0 / 16) * kt_stride, kt_stride, (n + 15) / 16, d, qp, scale, sp);
    const float alpha = sluice::kernels::softmax_chunk({scores.data(), size_t(n)}, max, lanes);
    for (float& x : out) x *= alpha;
    const float* wp[1] = {scores.data()};
    float* op[1] = {out.data()};
    sluice::kernels::add_weighted_value_rows(v.data() + size_t(c0 * dv), dv, n, dv, wp, op);
  }
  const float total = sluice::kernels::reduce_key_block_lanes(lanes);
  double worst = 0.0;
  for (int64_t i = 0; i < dv; ++i) {
    double want = 0.0;
    for (int64_t j = 0; j < n_cells; ++j) want += p[size_t(j)] / sum * double(f32(v[size_t(j * dv + i)]));
    worst = std::max(worst, std::fabs(double(out[size_t(i)] / total) - want));
  }
  MESSAGE("largest |online - double| over " << dv << " outputs: " << worst);
  CHECK(worst < 1e-5);
}
