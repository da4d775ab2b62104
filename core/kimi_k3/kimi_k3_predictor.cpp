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
  static Sizes of(const KimiK3Model& model, unsigned n_threads) {
    const KimiK3Config& c = model.config();
    const auto R = static_cast<size_t>(KimiK3Predictor::kScratchRows);
    Sizes s;
    s.h = R * static_cast<size_t>(c.n_embd);
    s.logits = R * static_cast<size_t>(std::max<int64_t>(c.n_expert, 1));
    s.top = static_cast<size_t>(std::max<int64_t>(c.n_expert_used, 1));
    s.mark = static_cast<size_t>(std::max<int64_t>(c.n_expert, 1));
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const Tensor& g = model.layer(il).gate_inp;
      if (c.is_moe_layer(il) && g.ne[0] > 0)
        s.mm = std::max(s.mm, kernels::matmul_scratch_bytes(g.type, g.ne[0], KimiK3Predictor::kScratchRows, n_threads));
    }
    return s;
  }
  // h_, logits_, sel_ (floats); top_, ids_, counts_ (4 bytes); mark_; matmul scratch.
  uint64_t bytes() const { return (h + 2 * logits) * sizeof(float) + (top + 2 * mark) * sizeof(int32_t) + mark + mm; }
};

}  // namespace

KimiK3Predictor::KimiK3Predictor(const KimiK3Model& model, int depth, unsigned n_threads)
    : model_(model), depth_(depth) {
  if (depth < 1) throw Error(ErrorCode::invalid_argument, "prefetch depth " + std::to_string(depth) + " must be >= 1");
  const Sizes s = Sizes::of(model, n_threads);
  h_.assign(s.h, 0.0f);
  logits_.assign(s.logits, 0.0f);
  sel_.assign(s.logits, 0.0f);
  top_.assign(s.top, 0);
  ids_.assign(s.mark, 0);
  counts_.assign(s.mark, 0);
  mark_.assign(s.mark, 0);
  mm_scratch_.assign(s.mm, std::byte{0});
}

uint64_t KimiK3Predictor::scratch_bytes_for(const KimiK3Model& model, unsigned n_threads) {
  return Sizes::of(model, n_threads).bytes();
}
uint64_t KimiK3Predictor::scratch_bytes() const {
  return (h_.size() + logits_.size() + sel_.size()) * sizeof(float) + (top_.size() + ids_.size()) * sizeof(int32_t) +
         counts_.size() * sizeof(uint32_t) + mark_.size() + mm_scratch_.size();
}

void KimiK3Predictor::select(const KimiK3Layer& L, std::span<const float> rows, int64_t n, kernels::ThreadPool& pool) {
  const KimiK3Config& c = model_.config();
  const int64_t E = c.n_embd, NE = c.n_expert;
  const size_t nh = static_cast<size_t>(n * E), nl = static_cast<size_t>(n * NE);
  // Rows of n_embd (rows may be h_ itself: rms_norm works in place).
  kernels::rms_norm(rows.first(nh), L.ffn_norm ? L.ffn_norm.f32() : std::span<const float>{}, c.rms_eps, E,
                    {h_.data(), nh});
  kernels::matmul(L.gate_inp.matrix(), {h_.data(), nh}, n, {logits_.data(), nl}, mm_scratch_, pool);
  kernels::sigmoid({logits_.data(), nl}, {sel_.data(), nl});
  if (L.exp_probs_b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < NE; ++e) sel_[static_cast<size_t>(t * NE + e)] += L.exp_probs_b.f32()[static_cast<size_t>(e)];
}

void KimiK3Predictor::predict(int64_t il, std::span<const float> u, int64_t n, ExpertSource& source,
                              kernels::ThreadPool& pool) {
  if (n >= kReadAheadMinRows) return read_ahead(il, u, n, source, pool);
  if (n < 1 || n > kMaxRows) return;
  const KimiK3Config& c = model_.config();
  const int64_t NE = c.n_expert;
  const int64_t keep = std::max<int64_t>(1, c.n_expert_used / 4);
  int done = 0;
  for (int64_t m = il + 1; m < c.n_layer && done < depth_; ++m) {
    if (!c.is_moe_layer(m)) continue;
    ++done;
    const KimiK3Layer& L = model_.layer(m);
    if (!L.gate_inp) continue;
    select(L, u, n, pool);
    std::fill(mark_.begin(), mark_.end(), 0);
    int64_t n_ids = 0;
    for (int64_t t = 0; t < n; ++t) {
      kernels::top_k({sel_.data() + t * NE, static_cast<size_t>(NE)}, {top_.data(), static_cast<size_t>(keep)});
      for (int64_t j = 0; j < keep; ++j) {
        const int32_t e = top_[static_cast<size_t>(j)];
        if (!mark_[static_cast<size_t>(e)]) mark_[static_cast<size_t>(e)] = 1, ids_[static_cast<size_t>(n_ids++)] = e;
      }
    }
    source.prefetch(static_cast<int>(m), {ids_.data(), static_cast<size_t>(n_ids)});
  }
}

void KimiK3Predictor::read_ahead(int64_t il, std::span<const float> u, int64_t n, ExpertSource& source,
                                 kernels::ThreadPool& pool) {
  const KimiK3Config& c = model_.config();
  int64_t m = il + 1;
  while (m < c.n_layer && !c.is_moe_layer(m)) ++m;
  if (m >= c.n_layer) return;
  const KimiK3Layer& L = model_.layer(m);
  if (!L.gate_inp) return;
  const int64_t E = c.n_embd, NE = c.n_expert, k = c.n_expert_used, S = read_ahead_rows(n);
  // The spread rows, gathered into h_ (select() normalizes them in place).
  for (int64_t j = 0; j < S; ++j) {
    const int64_t row = read_ahead_row(j, n, S);
    std::copy_n(u.data() + row * E, E, h_.data() + j * E);
  }
  select(L, {h_.data(), static_cast<size_t>(S * E)}, S, pool);
  std::fill(counts_.begin(), counts_.end(), 0u);
  for (int64_t t = 0; t < S; ++t) {
    kernels::top_k({sel_.data() + t * NE, static_cast<size_t>(NE)}, {top_.data(), static_cast<size_t>(k)});
    for (int64_t j = 0; j < k; ++j) ++counts_[static_cast<size_t>(top_[static_cast<size_t>(j)])];
  }
  const size_t n_list = order_by_picks(counts_, ids_);
  source.read_ahead(static_cast<int>(m), {ids_.data(), n_list});
}

}  // namespace sluice::core
