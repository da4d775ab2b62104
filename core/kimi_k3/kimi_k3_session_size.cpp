// KimiK3Session::scratch_bytes_for: the constructor's buffer sizes, summed without allocating, so
// the engine can check a budget (and pick a batch) before anything is allocated. It mirrors the
// constructor line by line; test_engine.cpp checks that both agree.
#include <algorithm>

#include "core/kimi_k3/kimi_k3_session.h"
#include "kernels/kda_chunked.h"
#include "kernels/matvec.h"

namespace sluice::core {

uint64_t KimiK3Session::scratch_bytes_for(const KimiK3Model& model, const KimiK3SessionOptions& options,
                                          unsigned threads) {
  const KimiK3Config& c = model.config();
  check_route_policy(options.route, c.n_expert_used);
  const int64_t B = std::max<int64_t>(options.n_batch, 1), E = c.n_embd, DI = c.d_inner(), H = c.n_head,
                D = c.kda_head_dim;
  uint64_t floats = 0, ints = 0;
  auto f = [&](int64_t n) { floats += static_cast<uint64_t>(std::max<int64_t>(n, 1)); };
  auto i32 = [&](int64_t n) { ints += static_cast<uint64_t>(std::max<int64_t>(n, 1)); };
  for (int k = 0; k < 5; ++k) f(B * E);                         // x_, r_, u_, h_, a_
  f(c.n_checkpoints() * B * E);                                 // stack_
  f(c.n_checkpoints() + 1);                                     // mix_probs_
  uint64_t bytes = static_cast<uint64_t>(c.n_checkpoints() + 1) * sizeof(float*);  // mix_rows_
  if (c.n_kda_layers() > 0) {
    f(B * DI);                                                  // proj_
    for (int k = 0; k < 3; ++k) f(B * DI);                      // conv_out_
    for (int k = 0; k < 5; ++k) f(B * DI);                      // z_, g_, o_, g2_, exp_g_
    f(B * D);                                                   // fa_
    f(B * H);                                                   // beta_
    f(c.d_conv - 1 + B);                                        // conv_win_
    if (options.chunked_kda) f(kernels::kda_chunked_scratch_floats(D, kernels::kKdaChunk, std::max(1u, threads)));
  }
  if (c.n_mla_layers() > 0) {
    const int64_t R = c.mla_row(), dqk = c.qk_nope + c.qk_rope;
    const int64_t n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min<int64_t>(c.n_ctx_train, 4096);
    f(B * std::max<int64_t>(c.q_lora_rank, 1));                 // qa_
    f(B * H * dqk);                                             // q_
    f(B * R);                                                   // kv_
    f(B * c.qk_nope);                                           // q_nope_
    f(B * c.kv_lora_rank);                                      // q_abs_
    f(B * H * R);                                               // qh_
    f(B * c.kv_lora_rank);                                      // o_lat_
    f(B * c.v_head_dim);                                        // o_head_
    f(B * H * c.v_head_dim);                                    // mla_o_
    f(B * H * c.v_head_dim);                                    // gate_
    const int64_t n_pad = (n_ctx + 63) / 64 * 64;
    f(n_pad);                                                   // scores_
    f(n_pad);                                                   // kv_col_
    if (options.kv_type != GgmlType::F32) f(n_ctx * R);         // kv_f32_
    if (has_mla_form(c, options, n_ctx))                        // mla_form_, mla_rows_, mla_pos_
      bytes += MlaDecompressedAttention::bytes({H, c.qk_nope, c.qk_rope, c.kv_lora_rank, c.v_head_dim, c.kq_scale}, n_ctx,
                                               B, static_cast<int64_t>(std::max(1u, threads))) +
               2 * static_cast<uint64_t>(B) * sizeof(int64_t);
  }
  const int64_t ff = std::max({c.n_ff, c.n_ff_shexp, c.n_ff_exp});
  f(B * ff);                                                    // ffn_g_
  f(B * ff);                                                    // ffn_u_
  f(B * E);                                                     // ffn_out_
  if (c.n_layer_dense_lead < c.n_layer) {
    const int64_t L = c.expert_width(), k = c.n_expert_used;
    for (int j = 0; j < 3; ++j) f(B * c.n_expert);              // router_, probs_, sel_
    f(B * k);                                                   // route_w_
    i32(B * k);                                                 // route_ids_
    f(std::max<int64_t>(c.n_expert_groups, 1));                 // group_scores_
    i32(std::max<int64_t>(c.n_expert_groups, 1));               // group_top_
    i32(c.n_expert);                                            // expert_list_
    i32(c.n_expert);                                            // pending_
    if (!options.route.exact()) bytes += static_cast<uint64_t>(c.n_expert);  // route_cached_
    i32(B * k);                                                 // gather_
    f(B * L);                                                   // zl_
    f(B * L);                                                   // xe_
    f(B * c.n_ff_exp);                                          // ge_
    f(B * c.n_ff_exp);                                          // ue_
    f(B * L);                                                   // ye_
    f(B * k * L);                                               // expert_out_
    if (options.exchange) f(B * k * L);                         // exchange_scratch_
    f(B * L);                                                   // moe_
    f(B * E);                                                   // sh_
  }
  f(options.logit_rows() * c.n_vocab);                          // logits_
  if (options.n_seq > 1) f(options.logit_rows() * c.n_vocab);   // batch_logits_
  size_t mm = 0;
  for (const GgufTensorInfo& t : model.gguf().tensors()) {
    if (t.n_dims < 2) continue;
    mm = std::max(mm, kernels::matmul_scratch_bytes(t.type, t.ne[0], B, threads));
    mm = std::max(mm, kernels::matmul_scratch_bytes(GgmlType::F32, t.ne[0], B, threads));
  }
  bytes += static_cast<uint64_t>(std::max<size_t>(mm, 1));     // mm_scratch_
  if (options.prefetch_depth > 0 && c.n_expert > 0) bytes += KimiK3Predictor::scratch_bytes_for(model, threads);  // predictor_
  return floats * sizeof(float) + ints * sizeof(int32_t) + bytes;
}

}  // namespace sluice::core
