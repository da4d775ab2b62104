// MLA prefill in the decompressed form for the llama family (deepseek2 / Kimi K2): which sequences
// of a batch take it, and their attention through core/compute/mla_decompressed_attention.h.
#include "core/llama/session.h"

namespace sluice::core {

bool LlamaSession::mla_decompresses(size_t s) const {
  return mla_form_ && seq_count_[s] >= mla_min_tokens_ && seq_used_[s] >= mla_min_cells_;
}

void LlamaSession::attention_mla_decompressed(int64_t il, int64_t n) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.n_head, K = c.qk_nope + c.qk_rope, V = c.v_head_dim;
  for (size_t s = 0; s < kv_.size(); ++s) {
    if (!mla_decompressed_[s] || seq_count_[s] == 0) continue;
    // The sequence's tokens in the batch, positions ascending.
    size_t nt = 0;
    for (int64_t t = 0; t < n; ++t)
      if (static_cast<size_t>(seq_[static_cast<size_t>(t)]) == s) mla_tokens_[nt++] = t;
    const KvCache& kv = kv_[s];
    const MlaSequence seq{{mla_tokens_.data(), nt},
                          pos_.data(),
                          q_.data(),
                          static_cast<size_t>(H * K),
                          heads_out_.data(),
                          static_cast<size_t>(H * V),
                          kv.k(il, 0),
                          kv.k_row_bytes(),
                          kv.type(),
                          seq_used_[s]};
    mla_form_->attend(seq, layer_->wk_b, layer_->wv_b, pool_);
  }
}

}  // namespace sluice::core
