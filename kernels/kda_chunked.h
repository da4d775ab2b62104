// kda_chunked: the chunked (parallel-within-chunk) form of the KDA recurrence (kernels/kda.h),
// llama.cpp's build_delta_net_chunking with chunk size C (16 for KDA). Same inputs, outputs and
// state layout as kda_recurrence; identical math up to rounding. It trades the per-token
// rank-1 updates for C x C and C x D products, which is the form a GPU prefill wants.
//
// Per head, per chunk of L <= C tokens with local index i, incoming state S:
//   G_i     = sum_{s<=i} g_s                         cumulative log-decay per key channel [L][D]
//   A[i][j] = beta_i * sum_c k_i[c] exp(G_i[c]-G_j[c]) k_j[c]      j <  i (strictly lower)
//   P[i][j] =          sum_c q~_i[c] exp(G_i[c]-G_j[c]) k_j[c]     j <= i, q~ = q * scale
//   U       = (I + A)^{-1} diag(beta) V                 forward substitution
//   W       = (I + A)^{-1} diag(beta) (K . exp(G))
//   V_new   = U - W S
//   O       = (Q~ . exp(G)) S + P V_new
//   S_next  = diag(exp(G_last)) S + (K . exp(G_last - G))^T V_new
// exp(G_i - G_j) is the exponent of a difference (never a ratio of exponentials), as llama.cpp
// builds its decay mask. Heads run in parallel on the pool, each with its own scratch slot.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/thread_pool.h"

namespace sluice::kernels {

constexpr int64_t kKdaChunk = 16;

// Floats of scratch kda_chunked needs for `n_threads` pool threads.
int64_t kda_chunked_scratch_floats(int64_t D, int64_t chunk, unsigned n_threads);

void kda_chunked(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                 std::span<const float> g, std::span<const float> beta, std::span<float> state,
                 int64_t n_tokens, int64_t H, int64_t D, float scale, int64_t chunk,
                 std::span<float> out, std::span<float> scratch, ThreadPool& pool);

}  // namespace sluice::kernels
