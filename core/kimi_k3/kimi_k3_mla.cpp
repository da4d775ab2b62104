// MLA layer of the kimi-k3 forward pass (spec section 7): absorbed, no RoPE, latent MQA cache,
// sigmoid output gate. Reads h_, writes a_.
#include <cstring>
#include <limits>

#include "core/kimi_k3/kimi_k3_session.h"
#include "kernels/activations.h"
#include "kernels/quant.h"
#include "kernels/dot_f32.h"
#include "kernels/softmax.h"

namespace sluice::core {

void KimiK3Session::mla(int64_t il, int64_t n, int64_t start_pos) {
  const KimiK3Config& c = model_.config();
  const KimiK3Layer& L = *layer_;
  const int64_t H = c.n_head, NOPE = c.qk_nope, ROPE = c.qk_rope, KL = c.kv_lora_rank, R = c.mla_row();
  const int64_t DQK = NOPE + ROPE, DV = c.v_head_dim;

  // q = q_b(RMSNorm(q_a h)) or q = attn_q h: [n][H][q_nope | q_pe].
  if (L.wq_a) {
    matmul(L.wq_a.matrix(), h_.data(), n, qa_.data());
    rms_norm(qa_.data(), L.q_a_norm, n, c.q_lora_rank, qa_.data());
    matmul(L.wq_b.matrix(), qa_.data(), n, q_.data());
  } else {
    matmul(L.wq.matrix(), h_.data(), n, q_.data());
  }
  // Cache rows [RMSNorm(c) | k_pe], written before attention (a token attends to itself).
  matmul(L.wkv_a_mqa.matrix(), h_.data(), n, kv_.data());
  for (int64_t t = 0; t < n; ++t) {
    float* row = kv_.data() + t * R;
    rms_norm(row, L.kv_a_norm, 1, KL, row);
    std::byte* dst = state_->kv_row(il, start_pos + t);
    if (state_->kv_type() == GgmlType::F32) std::memcpy(dst, row, static_cast<size_t>(R) * sizeof(float));
    else kernels::quantize_row(state_->kv_type(), row, dst, R);
  }
  const int64_t n_kv = start_pos + n;
  // A long prompt takes the decompressed form (core/compute/mla_decompressed_attention.h).
  if (mla_form_ && n >= mla_min_tokens_ && n_kv >= mla_min_cells_) {
    for (int64_t t = 0; t < n; ++t) {
      mla_rows_[static_cast<size_t>(t)] = t;
      mla_pos_[static_cast<size_t>(t)] = start_pos + t;
    }
    const MlaSequence seq{{mla_rows_.data(), static_cast<size_t>(n)},
                          mla_pos_.data(),
                          q_.data(),
                          static_cast<size_t>(H * DQK),
                          mla_o_.data(),
                          static_cast<size_t>(H * DV),
                          state_->kv_row(il, 0),
                          state_->kv_row_bytes(),
                          state_->kv_type(),
                          n_kv};
    mla_form_->attend(seq, L.wk_b, L.wv_b, pool_);
  } else {
    mla_absorbed(il, n, start_pos);
  }
  output_gate_and_project(n);
}

// llama.cpp's absorbed form: Q_h = [k_b_h q_nope_h | q_pe_h] against the cached [c | k_pe] rows.
void KimiK3Session::mla_absorbed(int64_t il, int64_t n, int64_t start_pos) {
  const KimiK3Config& c = model_.config();
  const KimiK3Layer& L = *layer_;
  const int64_t H = c.n_head, NOPE = c.qk_nope, ROPE = c.qk_rope, KL = c.kv_lora_rank, R = c.mla_row();
  const int64_t DQK = NOPE + ROPE, DV = c.v_head_dim;
  const int64_t n_kv = start_pos + n;
  // The cached rows of positions [0, start_pos + n) as floats: the cache itself when it is F32 (a
  // layer's rows are contiguous), else widened into scratch.
  const float* kv_rows = reinterpret_cast<const float*>(state_->kv_row(il, 0));
  if (state_->kv_type() != GgmlType::F32) {
    for (int64_t s = 0; s < n_kv; ++s) kernels::dequantize_row(state_->kv_type(), state_->kv_row(il, s), kv_f32_.data() + s * R, R);
    kv_rows = kv_f32_.data();
  }

  // Q_h = [k_b_h q_nope_h | q_pe_h] per head: [n][H][R].
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(q_nope_.data() + t * NOPE, q_.data() + (t * H + h) * DQK, static_cast<size_t>(NOPE) * sizeof(float));
    matmul(L.wk_b.slice(h), q_nope_.data(), n, q_abs_.data(), MatKind::permuted);  // q_nope view
    for (int64_t t = 0; t < n; ++t) {
      float* qh = qh_.data() + (t * H + h) * R;
      std::memcpy(qh, q_abs_.data() + t * KL, static_cast<size_t>(KL) * sizeof(float));
      std::memcpy(qh + KL, q_.data() + (t * H + h) * DQK + NOPE, static_cast<size_t>(ROPE) * sizeof(float));
    }
  }

  // Causal softmax(Q_h . K / sqrt(d_qk)) over the cache, values = the latent part of each row;
  // then o_h = v_b_h o_lat_h, heads concatenated: [n][H * d_v]. The score row is padded to a whole
  // number of 16-value chunks with masked (-inf -> 0) entries, as ggml's soft_max sees llama.cpp's
  // padded KV cells; KQ, softmax and the value sum follow ggml's float order (kernels/dot_f32.h,
  // kernels/softmax.h).
  const int64_t W = 16;  // AVX-512 floats per vector on the reference build
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      const float* qh = qh_.data() + (t * H + h) * R;
      const int64_t n_att = start_pos + t + 1, n_pad = (n_att + W - 1) / W * W;
      const int64_t n_val = (n_att + 63) / 64 * 64;  // zero-padded cells for the one-token vector dot
      for (int64_t s = 0; s < n_pad; ++s)
        scores_[static_cast<size_t>(s)] =
            s < n_att ? kernels::dot_f32_ggml_vec(qh, kv_rows + s * R, R) : -std::numeric_limits<float>::infinity();
      kernels::softmax({scores_.data(), static_cast<size_t>(n_pad)}, c.kq_scale);
      for (int64_t s = n_pad; s < n_val; ++s) scores_[static_cast<size_t>(s)] = 0.0f;
      float* ol = o_lat_.data() + t * KL;
      for (int64_t i = 0; i < KL; ++i) {
        float* col = kv_col_.data();
        // A batch sums the values with tinyBLAS, a single token with ggml_vec_dot_f32 (as matmuls).
        if (n == 1) {
          for (int64_t s = 0; s < n_val; ++s) col[s] = s < n_att ? kv_rows[s * R + i] : 0.0f;
          ol[i] = kernels::dot_f32_ggml_vec(scores_.data(), col, n_val);
        } else {
          for (int64_t s = 0; s < n_pad; ++s) col[s] = s < n_att ? kv_rows[s * R + i] : 0.0f;
          ol[i] = kernels::dot_f32_tinyblas(scores_.data(), col, n_pad);
        }
      }
    }
    matmul(L.wv_b.slice(h), o_lat_.data(), n, o_head_.data());
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(mla_o_.data() + (t * H + h) * DV, o_head_.data() + t * DV, static_cast<size_t>(DV) * sizeof(float));
  }
}

void KimiK3Session::output_gate_and_project(int64_t n) {
  const KimiK3Config& c = model_.config();
  const KimiK3Layer& L = *layer_;
  // Sigmoid output gate from the normed input, before attn_output.
  const size_t no = static_cast<size_t>(n * c.n_head * c.v_head_dim);
  if (L.w_gate) {
    matmul(L.w_gate.matrix(), h_.data(), n, gate_.data());
    kernels::sigmoid({gate_.data(), no}, {gate_.data(), no});
    for (size_t i = 0; i < no; ++i) mla_o_[i] *= gate_[i];
  }
  matmul(L.wo.matrix(), mla_o_.data(), n, a_.data());
}

}  // namespace sluice::core
