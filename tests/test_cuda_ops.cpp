// CUDA rms_norm, rope, swiglu, route and attention against the CPU layer on random inputs with
// fixed seeds. Tolerances (normalized MSE), each from the only difference left:
//   rms_norm  1e-12  summation order of the double sum of squares
//   rope      1e-10  cosf/sinf/logf of the GPU vs libm (an ulp or two)
//   swiglu    1e-12  expf vs ggml's vectorized expf
//   route     ids equal; weights 1e-10 (expf, block summation order)
//   attention 1e-10  f32 dot and online-softmax summation order
#include <doctest/doctest.h>

#if SLUICE_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "core/llama/router.h"
#include "kernels/activations.h"
#include "kernels/cuda/ops.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "tests/cuda_test_util.h"
#include "tests/kernels_reference.h"

namespace cu = sluice::kernels::cuda;
using namespace sluice::test;

TEST_CASE("cuda rms_norm matches the CPU layer, with and without a weight, in place") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  for (int64_t n : {7, 512, 4103, 7168}) {
    const int64_t rows = 5;
    const auto x = random_row(n * rows, 3 + uint32_t(n), 2.0f);
    const auto weight = random_row(n, 4, 1.0f);
    const auto dx = to_device(x, stream);
    const auto dw = to_device(weight, stream);
    cu::DeviceBuffer dy(size_t(n * rows) * 4);
    for (bool with_weight : {true, false}) {
      INFO("n " << n << (with_weight ? " with weight" : " plain"));
      std::vector<float> want(x.size());
      sluice::kernels::rms_norm(x, with_weight ? std::span<const float>(weight) : std::span<const float>(), 1e-6f, n,
                                want);
      cu::rms_norm(dev_ptr<float>(dx), with_weight ? dev_ptr<float>(dw) : nullptr, 1e-6f, n, rows, dev_ptr<float>(dy),
                   stream);
      CHECK(nmse(to_host<float>(dy, x.size(), stream), want) <= 1e-12);
    }
    // In place: y aliases x.
    std::vector<float> want(x.size());
    sluice::kernels::rms_norm(x, weight, 1e-5f, n, want);
    cu::rms_norm(dev_ptr<float>(dx), dev_ptr<float>(dw), 1e-5f, n, rows, dev_ptr<float>(dx), stream);
    CHECK(nmse(to_host<float>(dx, x.size(), stream), want) <= 1e-12);
  }
}

TEST_CASE("cuda rope matches the CPU layer for NORM, NEOX and YaRN on strided heads") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  sluice::kernels::RopeParams norm;
  norm.n_dims = 64;
  sluice::kernels::RopeParams neox = norm;
  neox.mode = sluice::kernels::RopeMode::neox;
  neox.n_dims = 128;
  neox.freq_base = 1000000.0f;
  sluice::kernels::RopeParams yarn = norm;  // deepseek2: 64 rope dims inside 192-float heads
  yarn.n_ctx_orig = 4096;
  yarn.freq_scale = 1.0f / 40.0f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 1.0f;
  for (const auto& p : {norm, neox, yarn}) {
    const int64_t n_tokens = 6, n_heads = 16, head_stride = 192, row_stride = n_heads * head_stride + 8;
    INFO("n_dims " << p.n_dims << (p.mode == sluice::kernels::RopeMode::neox ? " neox" : " norm")
                   << (p.ext_factor != 0 ? " yarn" : ""));
    const auto x = random_row(n_tokens * row_stride, 21, 1.0f);
    const std::vector<int32_t> positions{0, 1, 2, 517, 4096, 30000};
    std::vector<float> want = x;
    std::vector<float> cache(size_t(p.n_dims));
    for (int64_t t = 0; t < n_tokens; ++t) {
      sluice::kernels::rope_cache(p, positions[size_t(t)], cache);
      sluice::kernels::rope_apply(p, cache, want.data() + t * row_stride, n_heads, head_stride);
    }
    const auto dx = to_device(x, stream);
    const auto dpos = to_device(positions, stream);
    cu::rope(p, dev_ptr<float>(dx), n_tokens, row_stride, n_heads, head_stride, dev_ptr<int32_t>(dpos), stream);
    const auto got = to_host<float>(dx, x.size(), stream);
    CHECK(nmse(got, want) <= 1e-10);
    // Values past n_dims in each head, and the padding, pass through untouched.
    CHECK(got[size_t(head_stride - 1)] == x[size_t(head_stride - 1)]);
    CHECK(got[size_t(row_stride - 1)] == x[size_t(row_stride - 1)]);
  }
}

TEST_CASE("cuda swiglu matches the CPU layer, also in place") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  const int64_t n = 100003;
  const auto gate = random_row(n, 31, 3.0f), up = random_row(n, 32, 1.0f);
  std::vector<float> want(static_cast<size_t>(n));
  sluice::kernels::swiglu(gate, up, want);
  const auto dg = to_device(gate, stream), du = to_device(up, stream);
  cu::DeviceBuffer dy(size_t(n) * 4);
  cu::swiglu(dev_ptr<float>(dg), dev_ptr<float>(du), n, dev_ptr<float>(dy), stream);
  CHECK(nmse(to_host<float>(dy, size_t(n), stream), want) <= 1e-12);
  cu::swiglu(dev_ptr<float>(dg), dev_ptr<float>(du), n, dev_ptr<float>(dg), stream);
  CHECK(nmse(to_host<float>(dg, size_t(n), stream), want) <= 1e-12);
}

TEST_CASE("cuda route selects the CPU router's experts and weights") {
  if (skip_without_gpu()) return;
  cu::Stream stream;
  std::mt19937 rng(5);
  struct Case {
    int64_t n_expert, k;
    cu::Gating gating;
    bool norm, bias;
    float scale;
  };
  for (const Case& c : {Case{256, 8, cu::Gating::sigmoid, true, true, 2.5f}, Case{64, 6, cu::Gating::softmax, false, false, 1.0f},
                        Case{384, 8, cu::Gating::sigmoid, true, true, 2.827f}, Case{1024, 16, cu::Gating::softmax, true, true, 1.0f},
                        Case{8, 8, cu::Gating::softmax, true, false, 1.0f}}) {
    INFO(c.n_expert << " experts, top " << c.k);
    const int64_t n_tokens = 7;
    // Distinct logits (a shuffled ramp plus noise) so the top-k is far from ties; bias small.
    std::vector<float> logits(size_t(n_tokens * c.n_expert)), bias(size_t(c.n_expert));
    std::normal_distribution<float> noise(0.0f, 0.001f);
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::vector<int> perm(size_t(c.n_expert));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t e = 0; e < c.n_expert; ++e)
        logits[size_t(t * c.n_expert + e)] = float(perm[size_t(e)]) * (8.0f / float(c.n_expert)) - 4.0f + noise(rng);
    }
    for (auto& b : bias) b = c.bias ? noise(rng) : 0.0f;
    sluice::core::RouterParams p;
    p.gating = c.gating == cu::Gating::sigmoid ? sluice::core::GatingFunc::sigmoid : sluice::core::GatingFunc::softmax;
    p.n_expert = c.n_expert;
    p.n_expert_used = c.k;
    p.norm = c.norm;
    p.scale_on = c.scale != 1.0f;
    p.scale = c.scale;
    std::vector<int32_t> want_ids(size_t(n_tokens * c.k)), groups(1);
    std::vector<float> want_w(size_t(n_tokens * c.k)), scratch(p.scratch_floats());
    for (int64_t t = 0; t < n_tokens; ++t)
      sluice::core::route_token(p, std::span<const float>(logits).subspan(size_t(t * c.n_expert), size_t(c.n_expert)),
                                c.bias ? std::span<const float>(bias) : std::span<const float>(),
                                std::span<int32_t>(want_ids).subspan(size_t(t * c.k), size_t(c.k)),
                                std::span<float>(want_w).subspan(size_t(t * c.k), size_t(c.k)), groups, scratch);
    const auto dl = to_device(logits, stream), db = to_device(bias, stream);
    cu::DeviceBuffer di(want_ids.size() * 4), dw(want_w.size() * 4);
    cu::route(dev_ptr<float>(dl), c.bias ? dev_ptr<float>(db) : nullptr, n_tokens, c.n_expert, c.k, c.gating, c.norm,
              c.scale, dev_ptr<int32_t>(di), dev_ptr<float>(dw), stream);
    CHECK(to_host<int32_t>(di, want_ids.size(), stream) == want_ids);
    CHECK(nmse(to_host<float>(dw, want_w.size(), stream), want_w) <= 1e-10);
  }
  // Ties go to the lower id: equal logits pick experts 0..k-1.
  const std::vector<float> flat(32, 0.5f);
  const auto dl = to_device(flat, stream);
  cu::DeviceBuffer di(4 * 4), dw(4 * 4);
  cu::route(dev_ptr<float>(dl), nullptr, 1, 32, 4, cu::Gating::softmax, true, 1.0f, dev_ptr<int32_t>(di),
            dev_ptr<float>(dw), stream);
  CHECK(to_host<int32_t>(di, 4, stream) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(to_host<float>(dw, 4, stream) == std::vector<float>(4, 0.25f));
  // Limits are checked before launch.
  CHECK_THROWS_AS(cu::route(dev_ptr<float>(dl), nullptr, 1, 2048, 4, cu::Gating::softmax, true, 1.0f,
                            dev_ptr<int32_t>(di), dev_ptr<float>(dw), stream),
                  sluice::Error);
}

namespace {

// CPU attention in the layout of cu::attention: float dots, the CPU softmax, weighted sum in double.
std::vector<float> reference_attention(const cu::AttentionShape& s, const std::vector<float>& q,
                                       const float* k_cache, const float* v_cache, int64_t n_tokens,
                                       int64_t start_pos, size_t out_size) {
  std::vector<float> out(out_size, 0.0f);
  const int64_t group = s.n_head / s.n_head_kv;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t g = h / group, n_vis = start_pos + t + 1;
      std::vector<float> scores(static_cast<size_t>(n_vis));
      for (int64_t p = 0; p < n_vis; ++p) {
        double d = 0;
        for (int64_t i = 0; i < s.k_len; ++i)
          d += double(q[size_t(t * s.q_stride + h * s.q_head_stride + i)]) *
               double(k_cache[p * s.k_row_stride + g * s.k_head_stride + i]);
        scores[size_t(p)] = float(d);
      }
      sluice::kernels::softmax(scores, s.scale);
      for (int64_t i = 0; i < s.v_len; ++i) {
        double o = 0;
        for (int64_t p = 0; p < n_vis; ++p)
          o += double(scores[size_t(p)]) * double(v_cache[p * s.v_row_stride + g * s.v_head_stride + i]);
        out[size_t(t * s.out_stride + h * s.out_head_stride + i)] = float(o);
      }
    }
  }
  return out;
}

void check_attention(const cu::AttentionShape& s, int64_t n_ctx, bool mla, int64_t rope_len, int64_t n_tokens,
                     int64_t start_pos, uint32_t seed) {
  cu::Stream stream;
  const int64_t cache_floats = n_ctx * s.k_row_stride;
  auto k_cache = random_row(cache_floats, seed, 1.0f);
  std::vector<float> v_store = mla ? std::vector<float>{} : random_row(n_ctx * s.v_row_stride, seed + 1, 1.0f);
  const auto q = random_row(n_tokens * s.q_stride, seed + 2, 1.0f);
  const float* v_host = mla ? k_cache.data() + rope_len : v_store.data();
  const size_t out_size = size_t(n_tokens * s.out_stride);
  const auto want = reference_attention(s, q, k_cache.data(), v_host, n_tokens, start_pos, out_size);
  const auto dk = to_device(k_cache, stream);
  const auto dv = to_device(mla ? std::vector<float>(1) : v_store, stream);
  const auto dq = to_device(q, stream);
  cu::DeviceBuffer dout(out_size * 4);
  const float* v_dev = mla ? dev_ptr<float>(dk) + rope_len : dev_ptr<float>(dv);
  cu::attention(s, dev_ptr<float>(dq), dev_ptr<float>(dk), v_dev, n_tokens, start_pos, dev_ptr<float>(dout), stream);
  CHECK(nmse(to_host<float>(dout, out_size, stream), want) <= 1e-10);
}

}  // namespace

TEST_CASE("cuda attention matches the CPU for GQA heads") {
  if (skip_without_gpu()) return;
  cu::AttentionShape s;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.k_len = s.v_len = 128;
  s.q_stride = s.n_head * 128;
  s.q_head_stride = 128;
  s.k_row_stride = s.v_row_stride = s.n_head_kv * 128;
  s.k_head_stride = s.v_head_stride = 128;
  s.out_stride = s.n_head * 128;
  s.out_head_stride = 128;
  s.scale = 1.0f / std::sqrt(128.0f);
  SUBCASE("prompt from position 0") { check_attention(s, 64, false, 0, 5, 0, 40); }
  SUBCASE("decode steps past several tiles") { check_attention(s, 400, false, 0, 3, 330, 41); }
  SUBCASE("odd head sizes") {
    s.k_len = 72;
    s.v_len = 40;
    s.q_head_stride = 80;
    s.q_stride = s.n_head * 80 + 3;
    check_attention(s, 100, false, 0, 4, 60, 42);
  }
}

TEST_CASE("cuda attention matches the CPU for absorbed MLA (576-float keys, latent as value)") {
  if (skip_without_gpu()) return;
  const int64_t rope = 64, latent = 512;
  cu::AttentionShape s;
  s.n_head = 16;
  s.n_head_kv = 1;
  s.k_len = rope + latent;
  s.v_len = latent;
  s.q_stride = s.n_head * s.k_len;
  s.q_head_stride = s.k_len;
  s.k_row_stride = s.v_row_stride = s.k_len;
  s.k_head_stride = s.v_head_stride = 0;
  s.out_stride = s.n_head * latent;
  s.out_head_stride = latent;
  s.scale = 0.1352f;
  check_attention(s, 200, true, rope, 4, 0, 50);
  check_attention(s, 200, true, rope, 2, 150, 51);
}

#endif  // SLUICE_HAVE_CUDA
