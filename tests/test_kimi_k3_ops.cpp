// Kimi K3 ops (kernels/situ, short_conv, kda, kda_chunked, res_mix) against their definitions on
// random inputs and against llama.cpp's F32 activation trace of the tiny reference model
// (shared/reference/kimi-k3/kimi-k3-f32.trace.*), plus the session's state accounting and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/kimi_k3/kimi_k3_session.h"
#include "kernels/activations.h"
#include "kernels/dot_f32.h"
#include "kernels/softmax.h"
#include "kernels/kda.h"
#include "kernels/kda_chunked.h"
#include "kernels/res_mix.h"
#include "kernels/rms_norm.h"
#include "kernels/short_conv.h"
#include "kernels/situ.h"
#include "kernels/thread_pool.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

fs::path k3_dir() { return test::reference_dir() / "kimi-k3"; }

// llama.cpp's trace: named f32 tensors per decode call (0 = the 29-token prompt, 1 = first step).
class Trace {
 public:
  Trace() {
    index_ = nlohmann::json::parse(test::read_text(k3_dir() / "kimi-k3-f32.trace.json"));
    const std::vector<uint8_t> raw = test::read_file(k3_dir() / "kimi-k3-f32.trace.f32");
    data_.resize(raw.size() / 4);
    std::memcpy(data_.data(), raw.data(), data_.size() * 4);
  }
  // The n-th record named `name` in `call` (layers 1+ have two res_probs per call).
  std::vector<float> get(int call, const std::string& name, int nth = 0) const {
    for (const auto& r : index_)
      if (r["call"] == call && r["name"] == name && nth-- == 0) {
        const size_t off = r["offset"], cnt = r["count"];
        return {data_.begin() + off, data_.begin() + off + cnt};
      }
    FAIL("trace has no tensor '" << name << "' in call " << call);
    return {};
  }

 private:
  nlohmann::json index_;
  std::vector<float> data_;
};

bool have_reference() { return fs::exists(k3_dir() / "kimi-k3-f32.trace.json") && fs::exists(k3_dir() / "kimi-k3-f16.gguf"); }

using test::max_abs_diff;

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::abs(double(x)));
  return m;
}

// y[t][r] = W[r] . x[t] for an F32 matrix (the F16 file widened), in the order llama.cpp's F32
// matmul uses: tinyBLAS (llamafile sgemm) for contiguous activations, ggml_vec_dot_f32 for the
// permuted per-head views of MLA.
std::vector<float> matmul_f32(const kernels::WeightMatrix& m, const std::vector<float>& x, bool vec_dot = false) {
  REQUIRE(m.type == GgmlType::F32);
  const int64_t n = static_cast<int64_t>(x.size()) / m.n_cols;
  std::vector<float> y(static_cast<size_t>(n * m.n_rows));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < m.n_rows; ++r) {
      const float* row = reinterpret_cast<const float*>(m.data + r * m.row_stride);
      y[t * m.n_rows + r] = vec_dot ? kernels::dot_f32_ggml_vec(row, &x[t * m.n_cols], m.n_cols)
                                    : kernels::dot_f32_tinyblas(row, &x[t * m.n_cols], m.n_cols);
    }
  return y;
}

std::vector<float> random_vector(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("situ is the soft-capped gate times the soft-capped up branch and tends to silu(g)*u for small g") {
  const std::vector<float> g = {-3.0f, -0.5f, 0.0f, 0.01f, 1.0f, 4.0f}, u = {2.0f, -1.0f, 5.0f, 0.02f, 10.0f, -7.0f};
  std::vector<float> y(g.size()), y_plain(g.size());
  kernels::situ(g, u, 2.0f, 3.0f, y);
  kernels::situ(g, u, 2.0f, 0.0f, y_plain);
  for (size_t i = 0; i < g.size(); ++i) {
    const double sg = 1.0 / (1.0 + std::exp(-double(g[i])));
    const double a = 2.0 * std::tanh(g[i] / 2.0) * sg;
    CHECK(y[i] == doctest::Approx(a * 3.0 * std::tanh(u[i] / 3.0)).epsilon(1e-6));
    CHECK(y_plain[i] == doctest::Approx(a * u[i]).epsilon(1e-6));
  }
  std::vector<float> small(1);
  kernels::situ(std::vector<float>{0.01f}, std::vector<float>{0.02f}, 4.0f, 25.0f, small);
  CHECK(small[0] == doctest::Approx(0.01 / (1 + std::exp(-0.01)) * 0.02).epsilon(1e-4));
}

TEST_CASE("KDA chunked form equals the token recurrence, across chunk edges and carried state") {
  std::mt19937 rng(7);
  const int64_t H = 3, D = 32, T1 = 37, T2 = 5;
  kernels::ThreadPool pool(2);
  auto make = [&](int64_t T) {
    struct In {
      std::vector<float> q, k, v, g, beta;
    } in;
    in.q = random_vector(rng, T * H * D, -1, 1);
    in.k = random_vector(rng, T * H * D, -1, 1);
    in.v = random_vector(rng, T * H * D, -1, 1);
    in.g = random_vector(rng, T * H * D, -2.0f, 0.0f);
    in.beta = random_vector(rng, T * H, 0.0f, 1.0f);
    kernels::kda_l2_norm(in.q, D, 1e-5f);
    kernels::kda_l2_norm(in.k, D, 1e-5f);
    return in;
  };
  const auto a = make(T1), b = make(T2);
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> s_rec(H * D * D, 0.0f), s_chk(H * D * D, 0.0f);
  std::vector<float> scratch(kernels::kda_chunked_scratch_floats(D, kernels::kKdaChunk, pool.size()));
  for (const auto* in : {&a, &b}) {
    const int64_t T = static_cast<int64_t>(in->beta.size()) / H;
    std::vector<float> o_rec(T * H * D), o_chk(T * H * D), exp_g(T * H * D);
    kernels::kda_recurrence(in->q, in->k, in->v, in->g, in->beta, s_rec, T, H, D, scale, o_rec, exp_g, pool);
    kernels::kda_chunked(in->q, in->k, in->v, in->g, in->beta, s_chk, T, H, D, scale, kernels::kKdaChunk, o_chk, scratch,
                         pool);
    CHECK(max_abs_diff(o_rec, o_chk) <= 1e-5 * std::max(1.0, max_abs(o_rec)));
    CHECK(max_abs_diff(s_rec, s_chk) <= 1e-5 * std::max(1.0, max_abs(s_rec)));
  }
}

TEST_CASE("KDA recurrence reproduces llama.cpp's scan output bit for bit for the prompt and the first decode step") {
  REQUIRE_MESSAGE(have_reference(), "kimi-k3 reference missing under " << test::reference_dir().string());
  const Trace trace;
  const int64_t H = 2, D = 128;
  kernels::ThreadPool pool(2);
  for (int il = 0; il < 3; ++il) {
    CAPTURE(il);
    std::vector<float> S(H * D * D, 0.0f);
    for (int call = 0; call < 2; ++call) {
      const std::string l = "-" + std::to_string(il);
      std::vector<float> q = trace.get(call, "kda_q_conv" + l), k = trace.get(call, "kda_k_conv" + l);
      const std::vector<float> v = trace.get(call, "kda_v_conv" + l), g = trace.get(call, "kda_g1" + l),
                               beta = trace.get(call, "kda_beta" + l), want = trace.get(call, "kda_scan_out" + l);
      kernels::kda_l2_norm(q, D, 1e-5f);
      kernels::kda_l2_norm(k, D, 1e-5f);
      const int64_t T = static_cast<int64_t>(beta.size()) / H;
      std::vector<float> o(T * H * D), exp_g(T * H * D);
      kernels::kda_recurrence(q, k, v, g, beta, S, T, H, D, 1.0f / std::sqrt(float(D)), o, exp_g, pool);
      CHECK(max_abs_diff(o, want) == 0);  // bit-identical
    }
  }
}

TEST_CASE("short conv with silu reproduces llama.cpp's q/k/v conv outputs bit for bit, carrying the conv state into decode") {
  REQUIRE_MESSAGE(have_reference(), "kimi-k3 reference missing under " << test::reference_dir().string());
  const Trace trace;
  auto model = core::KimiK3Model::load((k3_dir() / "kimi-k3-f16.gguf").string(), {.widen_f16_to_f32 = true});
  const int64_t DI = model->config().d_inner(), K = model->config().d_conv;
  for (int il = 0; il < 3; ++il) {
    const core::KimiK3Layer& L = model->layer(il);
    const core::Tensor* w[3] = {&L.wq, &L.wk, &L.wv};
    const core::Tensor* taps[3] = {&L.conv_q, &L.conv_k, &L.conv_v};
    const char* names[3] = {"q", "k", "v"};
    for (int x = 0; x < 3; ++x) {
      CAPTURE(il);
      CAPTURE(names[x]);
      std::vector<float> state(DI * (K - 1), 0.0f);
      for (int call = 0; call < 2; ++call) {
        const std::vector<float> h = trace.get(call, "attn_norm-" + std::to_string(il));
        // One token (decode) goes through ggml_vec_dot_f32, a batch through tinyBLAS.
        const std::vector<float> p = matmul_f32(w[x]->matrix(), h, call == 1);
        const int64_t T = static_cast<int64_t>(p.size()) / DI;
        std::vector<float> y(p.size()), window(K - 1 + T);
        kernels::short_conv(p, taps[x]->f32(), state, T, DI, K, y, window);
        kernels::silu(y, y);
        const std::vector<float> want =
            trace.get(call, "kda_" + std::string(names[x]) + "_conv-" + std::to_string(il));
        CAPTURE(call);
        CHECK(max_abs_diff(y, want) == 0);  // bit-identical
      }
    }
  }
}

TEST_CASE("residual mix reproduces llama.cpp's final mixing probabilities and result_norm bit for bit") {
  REQUIRE_MESSAGE(have_reference(), "kimi-k3 reference missing under " << test::reference_dir().string());
  const Trace trace;
  auto model = core::KimiK3Model::load((k3_dir() / "kimi-k3-f16.gguf").string(), {.widen_f16_to_f32 = true});
  const int64_t E = model->config().n_embd;
  // Final mix over [embeddings, stream entering layer 2 (= l_out-1), final stream l_out-3].
  const std::vector<float> x0 = trace.get(0, "inp_embd"), x1 = trace.get(0, "l_out-1"), x2 = trace.get(0, "l_out-3");
  const std::vector<float> want_p = trace.get(0, "res_probs"), want_norm = trace.get(0, "result_norm");
  const int64_t T = static_cast<int64_t>(x0.size()) / E;
  std::vector<float> probs(3 * T), mixed(T * E), normed(T * E);
  for (int64_t t = 0; t < T; ++t) {
    const float* rows[3] = {&x0[t * E], &x1[t * E], &x2[t * E]};
    kernels::res_mix(rows, model->output_res_score().f32(), 1e-5f, {&probs[t * 3], 3}, {&mixed[t * E], size_t(E)});
  }
  CHECK(max_abs_diff(probs, want_p) == 0);
  kernels::rms_norm(mixed, model->output_norm().f32(), 1e-5f, E, normed);
  CHECK(max_abs_diff(normed, want_norm) == 0);
}

TEST_CASE("MLA attention core (KQ, soft_max, value sum) reproduces llama.cpp's probabilities and head outputs bit for bit") {
  REQUIRE_MESSAGE(have_reference(), "kimi-k3 reference missing under " << test::reference_dir().string());
  const Trace trace;
  auto model = core::KimiK3Model::load((k3_dir() / "kimi-k3-f16.gguf").string(), {.widen_f16_to_f32 = true});
  const core::KimiK3Config& c = model->config();
  const core::KimiK3Layer& L = model->layer(3);
  const int64_t H = c.n_head, NOPE = c.qk_nope, ROPE = c.qk_rope, KL = c.kv_lora_rank, R = c.mla_row(), DV = c.v_head_dim;
  const int64_t DQK = NOPE + ROPE, CELLS = 256;  // llama.cpp's padded KV cells in the trace
  const std::vector<float> h = trace.get(0, "attn_norm-3"), want_p = trace.get(0, "kq_soft_max-3"),
                           want_o = trace.get(0, "kqv_out-3");
  const int64_t T = static_cast<int64_t>(h.size()) / c.n_embd;
  std::vector<float> qa = matmul_f32(L.wq_a.matrix(), h);
  kernels::rms_norm(qa, L.q_a_norm.f32(), c.rms_eps, c.q_lora_rank, qa);
  const std::vector<float> q = matmul_f32(L.wq_b.matrix(), qa);
  std::vector<float> kv = matmul_f32(L.wkv_a_mqa.matrix(), h);
  for (int64_t t = 0; t < T; ++t)
    kernels::rms_norm({&kv[t * R], size_t(KL)}, L.kv_a_norm.f32(), c.rms_eps, KL, {&kv[t * R], size_t(KL)});
  test::RunningMax p_diff, o_diff;
  for (int64_t hh = 0; hh < H; ++hh) {
    std::vector<float> q_nope(T * NOPE);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < NOPE; ++i) q_nope[t * NOPE + i] = q[(t * H + hh) * DQK + i];
    const std::vector<float> q_abs = matmul_f32(L.wk_b.slice(hh), q_nope, true);
    std::vector<float> o_lat(T * KL), p(CELLS), col(CELLS), Q(R);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < KL; ++i) Q[i] = q_abs[t * KL + i];
      for (int64_t i = 0; i < ROPE; ++i) Q[KL + i] = q[(t * H + hh) * DQK + NOPE + i];
      for (int64_t s = 0; s < CELLS; ++s)
        p[s] = s <= t ? kernels::dot_f32_ggml_vec(Q.data(), &kv[s * R], R) : -std::numeric_limits<float>::infinity();
      kernels::softmax(p, c.kq_scale);
      for (int64_t s = 0; s < CELLS; ++s) p_diff.add_abs_diff(p[s], want_p[(hh * T + t) * CELLS + s]);
      for (int64_t i = 0; i < KL; ++i) {
        for (int64_t s = 0; s < CELLS; ++s) col[s] = s <= t ? kv[s * R + i] : 0.0f;
        o_lat[t * KL + i] = kernels::dot_f32_tinyblas(p.data(), col.data(), CELLS);
      }
    }
    const std::vector<float> o = matmul_f32(L.wv_b.slice(hh), o_lat);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < DV; ++i)
        o_diff.add_abs_diff(o[t * DV + i], want_o[t * H * DV + hh * DV + i]);
  }
  CHECK(p_diff.value() == 0);
  CHECK(o_diff.value() == 0);
}

TEST_CASE("dense situ FFN reproduces llama.cpp's layer-0 FFN output bit for bit") {
  REQUIRE_MESSAGE(have_reference(), "kimi-k3 reference missing under " << test::reference_dir().string());
  const Trace trace;
  auto model = core::KimiK3Model::load((k3_dir() / "kimi-k3-f16.gguf").string(), {.widen_f16_to_f32 = true});
  const core::KimiK3Layer& L = model->layer(0);
  const std::vector<float> h = trace.get(0, "ffn_norm-0"), want = trace.get(0, "ffn_out-0");
  std::vector<float> g = matmul_f32(L.ffn_gate.matrix(), h);
  const std::vector<float> u = matmul_f32(L.ffn_up.matrix(), h);
  kernels::situ(g, u, model->config().situ_beta, model->config().situ_lin_beta, g);
  CHECK(max_abs_diff(matmul_f32(L.ffn_down.matrix(), g), want) == 0);
}

TEST_CASE("kimi-k3 session sizes its recurrent state and MLA cache at construction and reports them in bytes") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string());
  const core::KimiK3Config& c = model->config();
  CHECK(c.n_kda_layers() == 3);
  CHECK(c.n_mla_layers() == 1);
  core::KimiK3InCoreExperts experts(*model);
  kernels::ThreadPool pool(1);
  core::KimiK3Session s(*model, experts, pool, {.n_ctx = 64, .n_batch = 16, .kv_type = GgmlType::F32});
  // Per KDA layer: conv 3 x (4-1) x 256 + S 2 x 128 x 128 floats; MLA: 64 rows of 256 + 64 floats.
  CHECK(s.recurrent_state_bytes() == 3u * (3 * 3 * 256 + 2 * 128 * 128) * 4);
  CHECK(s.kv_cache_bytes() == 64u * (256 + 64) * 4);
  core::KimiK3Session s16(*model, experts, pool, {.n_ctx = 64, .n_batch = 16, .kv_type = GgmlType::F16});
  CHECK(s16.kv_cache_bytes() == 64u * (256 + 64) * 2);
  CHECK(core::KimiK3State::recurrent_bytes_for(c) == s.recurrent_state_bytes());
  CHECK(core::KimiK3State::kv_bytes_for(c, 64, GgmlType::F16) == s16.kv_cache_bytes());

  const uint64_t before = s.state().bytes() + s.scratch_bytes();
  const int32_t toks[3] = {2047, 464, 627};
  s.forward(toks, 0);
  for (int64_t p = 3; p < 20; ++p) s.forward({&toks[p % 3], 1}, p);
  CHECK(s.state().bytes() + s.scratch_bytes() == before);
  MESSAGE("kimi-k3 tiny: recurrent state " << s.recurrent_state_bytes() << " B, MLA cache " << s.kv_cache_bytes()
                                           << " B (n_ctx 64, f32), scratch " << s.scratch_bytes() << " B");
}

TEST_CASE("kimi-k3 session rejects batches it cannot evaluate, naming the limit") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string());
  core::KimiK3InCoreExperts experts(*model);
  kernels::ThreadPool pool(1);
  core::KimiK3Session s(*model, experts, pool, {.n_ctx = 8, .n_batch = 4});
  const int32_t toks[5] = {1, 2, 3, 4, 5};
  auto expect = [&](auto&& fn, const std::string& needle) {
    try {
      fn();
      FAIL("no error; expected one mentioning '" << needle << "'");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  expect([&] { s.forward({toks, 5}, 0); }, "n_batch = 4");
  expect([&] { s.forward({}, 0); }, "got 0 tokens");
  const int32_t bad = 5000;
  expect([&] { s.forward({&bad, 1}, 0); }, "outside the vocabulary [0, 2048)");
  s.forward({toks, 2}, 0);
  expect([&] { s.forward({toks, 1}, 5); }, "does not continue the sequence (next position 2)");
  s.forward({toks, 4}, 2);
  s.forward({toks, 2}, 6);
  expect([&] { s.forward({toks, 1}, 8); }, "exceed the context of 8");
}

TEST_CASE("real Kimi K3 dimensions give 0.43 GiB of recurrent state and 576 cached values per MLA layer and token") {
  core::KimiK3Config c;
  c.n_layer = 93;
  c.n_head = 96;
  c.kda_head_dim = 128;
  c.d_conv = 4;
  c.kv_lora_rank = 512;
  c.qk_rope = 64;
  for (int64_t il = 0; il < c.n_layer; ++il) c.n_head_kv.push_back((il % 4 == 3 || il == 92) ? 1 : 0);
  CHECK(c.n_kda_layers() == 69);
  CHECK(c.n_mla_layers() == 24);
  CHECK(c.conv_state_floats() == 110592);
  CHECK(c.ssm_state_floats() == 1572864);
  CHECK(core::KimiK3State::recurrent_bytes_for(c) == 69ull * (110592 + 1572864) * 4);
  CHECK(core::KimiK3State::kv_bytes_for(c, 1000, GgmlType::F16) == 24ull * 1000 * 576 * 2);
}

TEST_CASE("kimi-k3 loader refuses a file of another architecture") {
  const fs::path gguf = test::reference_dir() / "tiny" / "deepseek2" / "deepseek2-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  try {
    core::KimiK3Model::load(gguf.string());
    FAIL("loaded a deepseek2 file as kimi-k3");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("is architecture 'deepseek2', not 'kimi-k3'") != std::string::npos);
  }
}
