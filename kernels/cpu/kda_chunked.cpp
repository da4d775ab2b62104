#include "kernels/kda_chunked.h"

#include <cmath>

namespace sluice::kernels {

namespace {

// Scratch of one head: G, QG (q~ . exp(G)), KG (k . exp(G)), U/V_new, W [C][D]; A, P [C][C].
int64_t slot_floats(int64_t D, int64_t C) { return 5 * C * D + 2 * C * C; }

void chunked_head(const float* q, const float* k, const float* v, const float* g, const float* beta,
                  float* St, int64_t n_tokens, int64_t H, int64_t h, int64_t D, float scale, int64_t C,
                  float* out, float* scratch) {
  float* G = scratch;
  float* QG = G + C * D;
  float* KG = QG + C * D;
  float* U = KG + C * D;
  float* W = U + C * D;
  float* A = W + C * D;
  float* P = A + C * C;
  auto row = [&](const float* base, int64_t t) { return base + (t * H + h) * D; };

  for (int64_t t0 = 0; t0 < n_tokens; t0 += C) {
    const int64_t L = n_tokens - t0 < C ? n_tokens - t0 : C;
    for (int64_t i = 0; i < L; ++i) {
      const float* gi = row(g, t0 + i);
      for (int64_t c = 0; c < D; ++c) G[i * D + c] = (i ? G[(i - 1) * D + c] : 0.0f) + gi[c];
      const float* qi = row(q, t0 + i);
      const float* ki = row(k, t0 + i);
      for (int64_t c = 0; c < D; ++c) {
        const float e = std::exp(G[i * D + c]);
        QG[i * D + c] = qi[c] * scale * e;
        KG[i * D + c] = ki[c] * e;
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      const float* ki = row(k, t0 + i);
      const float* qi = row(q, t0 + i);
      const float bi = beta[(t0 + i) * H + h];
      for (int64_t j = 0; j <= i; ++j) {
        const float* kj = row(k, t0 + j);
        float a = 0.0f, p = 0.0f;
        for (int64_t c = 0; c < D; ++c) {
          const float d = std::exp(G[i * D + c] - G[j * D + c]) * kj[c];
          a += ki[c] * d;
          p += qi[c] * d;
        }
        A[i * C + j] = j < i ? bi * a : 0.0f;
        P[i * C + j] = p * scale;
      }
    }
    // U = (I+A)^{-1} beta V and W = (I+A)^{-1} beta KG, by forward substitution.
    for (int64_t i = 0; i < L; ++i) {
      const float bi = beta[(t0 + i) * H + h];
      const float* vi = row(v, t0 + i);
      for (int64_t c = 0; c < D; ++c) {
        U[i * D + c] = bi * vi[c];
        W[i * D + c] = bi * KG[i * D + c];
      }
      for (int64_t j = 0; j < i; ++j) {
        const float a = A[i * C + j];
        for (int64_t c = 0; c < D; ++c) {
          U[i * D + c] -= a * U[j * D + c];
          W[i * D + c] -= a * W[j * D + c];
        }
      }
    }
    // V_new = U - W S (in U), then O = QG S + P V_new. S[c][j] = St[j][c].
    for (int64_t i = 0; i < L; ++i) {
      float* o = out + ((t0 + i) * H + h) * D;
      for (int64_t j = 0; j < D; ++j) {
        const float* sj = St + j * D;
        float ws = 0.0f, qs = 0.0f;
        for (int64_t c = 0; c < D; ++c) {
          ws += W[i * D + c] * sj[c];
          qs += QG[i * D + c] * sj[c];
        }
        U[i * D + j] -= ws;
        o[j] = qs;
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      float* o = out + ((t0 + i) * H + h) * D;
      for (int64_t s = 0; s <= i; ++s) {
        const float p = P[i * C + s];
        for (int64_t j = 0; j < D; ++j) o[j] += p * U[s * D + j];
      }
    }
    // S_next = diag(exp(G_last)) S + (K . exp(G_last - G))^T V_new; reuse KG for the decayed keys.
    const float* Gl = G + (L - 1) * D;
    for (int64_t i = 0; i < L; ++i) {
      const float* ki = row(k, t0 + i);
      for (int64_t c = 0; c < D; ++c) KG[i * D + c] = ki[c] * std::exp(Gl[c] - G[i * D + c]);
    }
    for (int64_t c = 0; c < D; ++c) QG[c] = std::exp(Gl[c]);
    for (int64_t j = 0; j < D; ++j) {
      float* sj = St + j * D;
      for (int64_t c = 0; c < D; ++c) {
        float acc = sj[c] * QG[c];
        for (int64_t i = 0; i < L; ++i) acc += KG[i * D + c] * U[i * D + j];
        sj[c] = acc;
      }
    }
  }
}

}  // namespace

int64_t kda_chunked_scratch_floats(int64_t D, int64_t chunk, unsigned n_threads) {
  return slot_floats(D, chunk) * static_cast<int64_t>(n_threads);
}

void kda_chunked(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                 std::span<const float> g, std::span<const float> beta, std::span<float> state,
                 int64_t n_tokens, int64_t H, int64_t D, float scale, int64_t chunk,
                 std::span<float> out, std::span<float> scratch, ThreadPool& pool) {
  // One head per work item; a chunk of heads runs on one thread, which owns one scratch slot
  // (slot = first head of the chunk's index among at most pool.size() chunks).
  const int64_t n_threads = pool.size();
  const int64_t per = (H + n_threads - 1) / n_threads;
  pool.parallel_for(H, per, [&](int64_t begin, int64_t end) {
    float* slot = scratch.data() + (begin / per) * slot_floats(D, chunk);
    for (int64_t h = begin; h < end; ++h)
      chunked_head(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data() + h * D * D, n_tokens,
                   H, h, D, scale, chunk, out.data(), slot);
  });
}

}  // namespace sluice::kernels
