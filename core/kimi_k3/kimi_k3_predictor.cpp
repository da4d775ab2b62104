#include "core/kimi_k3/kimi_k3_predictor.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/activations.h"
#include "kernels/matvec.h"
#include "kernels/rms_norm.h"
#include "kernels/topk.h"

namespace sluice::core {

namespace {

struct Sizes {
  size_t h = 0, logits = 0, top = 0, mark = 0, mm = 0;
  static Sizes of(const KimiK3Model& model) {
    const KimiK3Config& c = model.config();
    const auto R = static_cast<size_t>(KimiK3Predictor::kMaxRows);
    Sizes s;
    s.h = R * static_cast<size_t>(c.n_embd);
    s.logits = R * static_cast<size_t>(std::max<int64_t>(c.n_expert, 1));
    s.top = static_cast<size_t>(std::max<int64_t>(c.n_expert_used, 1));
    s.mark = static_cast<size_t>(std::max<int64_t>(c.n_expert, 1));
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const Tensor& g = model.layer(il).gate_inp;
      if (c.is_moe_layer(il) && g.ne[0] > 0) s.mm = std::max(s.mm, kernels::matmul_scratch_bytes(g.type, g.ne[0], KimiK3Predictor::kMaxRows));
    }
    return s;
  }
  // h_, logits_, sel_ (floats); top_, ids_ (int32); mark_; matmul scratch.
  uint64_t bytes() const { return (h + 2 * logits) * sizeof(float) + (top + mark) * sizeof(int32_t) + mark + mm; }
};

}  // namespace

KimiK3Predictor::KimiK3Predictor(const KimiK3Model& model, int depth) : model_(model), depth_(depth) {
  if (depth < 1) throw Error(ErrorCode::invalid_argument, "prefetch depth " + std::to_string(depth) + " must be >= 1");
  const Sizes s = Sizes::of(model);
  h_.assign(s.h, 0.0f);
  logits_.assign(s.logits, 0.0f);
  sel_.assign(s.logits, 0.0f);
  top_.assign(s.top, 0);
  ids_.assign(s.mark, 0);
  mark_.assign(s.mark, 0);
  mm_scratch_.assign(s.mm, std::byte{0});
}

uint64_t KimiK3Predictor::scratch_bytes_for(const KimiK3Model& model) { return Sizes::of(model).bytes(); }
uint64_t KimiK3Predictor::scratch_bytes() const { return scratch_bytes_for(model_); }

void KimiK3Predictor::predict(int64_t il, std::span<const float> u, int64_t n, ExpertSource& source,
                              kernels::ThreadPool& pool) {
  if (n < 1 || n > kMaxRows) return;
  const KimiK3Config& c = model_.config();
  const int64_t E = c.n_embd, NE = c.n_expert;
  const int64_t keep = std::max<int64_t>(1, c.n_expert_used / 4);
  int done = 0;
  for (int64_t m = il + 1; m < c.n_layer && done < depth_; ++m) {
    if (!c.is_moe_layer(m)) continue;
    ++done;
    const KimiK3Layer& L = model_.layer(m);
    if (!L.gate_inp) continue;
    const size_t nh = static_cast<size_t>(n * E), nl = static_cast<size_t>(n * NE);
    kernels::rms_norm(u.first(nh), L.ffn_norm ? L.ffn_norm.f32() : std::span<const float>{}, c.rms_eps, n,
                      {h_.data(), nh});
    kernels::matmul(L.gate_inp.matrix(), {h_.data(), nh}, n, {logits_.data(), nl}, mm_scratch_, pool);
    kernels::sigmoid({logits_.data(), nl}, {sel_.data(), nl});
    std::fill(mark_.begin(), mark_.end(), 0);
    int64_t n_ids = 0;
    for (int64_t t = 0; t < n; ++t) {
      float* sel = sel_.data() + t * NE;
      if (L.exp_probs_b)
        for (int64_t e = 0; e < NE; ++e) sel[e] += L.exp_probs_b.f32()[static_cast<size_t>(e)];
      kernels::top_k({sel, static_cast<size_t>(NE)}, {top_.data(), static_cast<size_t>(keep)});
      for (int64_t j = 0; j < keep; ++j) {
        const int32_t e = top_[static_cast<size_t>(j)];
        if (!mark_[static_cast<size_t>(e)]) mark_[static_cast<size_t>(e)] = 1, ids_[static_cast<size_t>(n_ids++)] = e;
      }
    }
    source.prefetch(static_cast<int>(m), {ids_.data(), static_cast<size_t>(n_ids)});
  }
}

}  // namespace sluice::core
