// Predicted next use ("predict"): evict the candidate expected to be needed last, Belady's rule
// with the future replaced by an estimate built from what real routing shows:
//
// * Layers are visited cyclically, once per token. A shard of layer l is next wanted at layer
//   l's next visit, d = (l - current_layer) mod n_layer steps away (n_layer for the current
//   layer). Plain LRU gets this backwards: the layer just computed holds the youngest shards,
//   though they are the ones needed last.
// * Temporal reuse: an expert used g visits ago is used at the next visit with probability
//   p(g), well above chance for small g (README: 0.39 vs 0.27 for Mixtral). p(g) is counted
//   online (every visit is a trial for every expert of the layer), seeded by a profile's reuse
//   counts, and scaled by the expert's relative use frequency^freq_weight.
// * Layer-to-layer transitions within a token: the experts this token chose at the current
//   layer predict its choice at the next `horizon` layers (README: precision 0.43 vs 0.09 for
//   FLAME-MoE). Counts P(j at l | i at l-1) come from the profile plus online counts; the
//   prediction for l is chained from l-1 and combined with p(g) as independent evidence (odds).
//
// * Token-to-token transitions at one layer (next_token): the experts a token chose at layer l
//   predict its successor's choice at l, beyond mere reuse of the same ids (FLAME-MoE: learned
//   from other sequences, +2 points of hit rate at 25%). Counts P(j at l, token t+1 | i at l,
//   token t) come from the profile plus online counts; each chosen i adds log(P(j | i) / (K/E))
//   to the log-odds of the shard's next visit: the previous token's experts for a layer this token
//   has yet to visit, this token's for a layer it has passed.
//
// If every later visit used the shard independently with probability p, its next use would be
// d + n_layer * (1 - p) / p steps away; with next_token the next visit has its own p1 (all the
// evidence) and the visits after it p2 (recency and frequency only, one visit older), giving
// d + n_layer * (1 - p1) / p2. The candidate with the largest value goes, ties to the least
// recently touched.
#include <algorithm>
#include <cmath>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

constexpr uint32_t kMaxGap = kMaxReuseGap;
constexpr size_t kMaxTransitionCells = size_t{1} << 24;  // L*E*E beyond this: no transitions
constexpr double kTransitionPrior = 2.0;                  // pseudo-count toward K/E
constexpr double kNextTokenPrior = 4.0;                   // the same for token-to-token counts
// The token-to-token table lives outside the budget, in the fixed allowance for bookkeeping:
// 8 MiB at most (the synthetic 3-MoE-layer Kimi K2 needs 3.4 MiB); a full 60-layer, 384-expert
// model goes without it.
constexpr size_t kMaxNextTokenCells = size_t{1} << 20;
double logit(double p) { return std::log(p / (1.0 - p)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

class PredictPolicy final : public EvictionPolicy {
 public:
  PredictPolicy(const ExpertProfile* profile, double freq_weight, uint32_t horizon, double profile_tokens,
                bool next_token)
      : freq_weight_(freq_weight), horizon_(horizon), profile_tokens_(profile_tokens), next_token_(next_token) {
    if (profile != nullptr && !profile->empty()) profile_ = *profile;
  }
  std::string_view name() const override { return "predict"; }

  void reset(const PolicyGeometry& g) override {
    g_ = g;
    const size_t n = g.n_shards();
    token_ = 1;
    cur_layer_ = 0;
    tick_ = 0;
    visits_.assign(g.n_layer, 0);
    visit_token_.assign(g.n_layer, 0);
    last_use_.assign(n, 0);
    touched_.assign(n, 0);
    gap_at_visit_.assign(n, kMaxGap);
    used_count_.assign(n, 0.0);
    layer_count_.assign(g.n_layer, 0.0);
    known_.clear();
    known_.reserve(g.n_expert);
    token_sets_.assign(g.n_layer, {});
    prev_sets_.assign(g.n_layer, {});
    base_ = g.n_expert ? static_cast<double>(g.n_expert_used) / g.n_expert : 0.0;
    // Prior: chance level K/E with the weight of a few trials, plus the profile's counts.
    trials_.assign(kMaxGap + 1, 4.0);
    hits_.assign(kMaxGap + 1, 4.0 * base_);
    const bool fits = n * g.n_expert <= kMaxTransitionCells;
    use_transitions_ = horizon_ > 0 && fits && g.n_layer > 1;
    use_next_ = next_token_ && n * g.n_expert <= kMaxNextTokenCells && g.n_expert > g.n_expert_used;
    next_.assign(use_next_ ? n * g.n_expert : 0, 0.0);
    next_src_.assign(use_next_ ? n : 0, 0.0);
    trans_.assign(use_transitions_ ? n * g.n_expert : 0, 0.0);
    trans_src_.assign(use_transitions_ ? n : 0, 0.0);
    const bool profile_fits = profile_.n_layer == g.n_layer && profile_.n_expert == g.n_expert;
    if (profile_fits) {
      for (size_t b = 0; b <= kMaxGap && b < profile_.reuse_trials.size(); ++b) {
        trials_[b] += profile_.reuse_trials[b];
        hits_[b] += profile_.reuse_hits[b];
      }
      // Frequencies from other requests transfer poorly (different prompts use different
      // experts), so they enter with the weight of profile_tokens tokens only.
      const double scale = profile_.n_tokens ? std::min(1.0, profile_tokens_ / profile_.n_tokens) : 0.0;
      for (size_t i = 0; i < n; ++i) {
        used_count_[i] = scale * profile_.counts[i];
        layer_count_[i / g.n_expert] += scale * profile_.counts[i];
      }
      if (use_transitions_ && profile_.transitions.size() == trans_.size()) {
        trans_ = profile_.transitions;
        trans_src_ = profile_.transition_src;
      }
      if (use_next_ && profile_.next_transitions.size() == next_.size()) {
        next_ = profile_.next_transitions;
        next_src_ = profile_.next_src;
      }
    }
    pred_.assign(use_transitions_ ? static_cast<size_t>(horizon_ + 1) * g.n_expert : 0, 0.0);
    pred_valid_ = false;
    freq_factor_.resize(n);
    for (size_t i = 0; i < n; ++i) update_freq_factor(i);
    layer_scale_.resize(g.n_layer);
    for (uint32_t l = 0; l < g.n_layer; ++l) update_layer_scale(l);
  }

  void on_token() override { ++token_; }

  void on_insert(ShardKey key) override { touched_[shard_index(key, g_.n_expert)] = ++tick_; }

  void on_access(ShardKey key, bool) override {
    const uint32_t l = key.layer;
    if (!in_visit(l)) start_visit(l);
    const size_t i = shard_index(key, g_.n_expert);
    touched_[i] = ++tick_;
    if (last_use_[i] == visits_[l]) return;  // already counted in this visit
    hits_[gap_at_visit_[i]] += 1.0;
    last_use_[i] = visits_[l];
    used_count_[i] += 1.0;
    layer_count_[l] += 1.0;
    update_freq_factor(i);
    update_layer_scale(l);
    if (use_transitions_ && l > 0 && same_token(l - 1)) {
      for (uint32_t from : token_sets_[l - 1]) trans_[(static_cast<size_t>(l) * g_.n_expert + from) * g_.n_expert + key.expert] += 1.0;
    }
    if (use_next_ && one_token(prev_sets_[l])) {
      for (uint32_t from : prev_sets_[l]) next_[(static_cast<size_t>(l) * g_.n_expert + from) * g_.n_expert + key.expert] += 1.0;
    }
    token_sets_[l].push_back(key.expert);
    pred_valid_ = false;
  }

  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey incoming) override {
    if (!in_visit(incoming.layer)) start_visit(incoming.layer);
    if (use_transitions_) predict_ahead(incoming);
    size_t best = 0;
    double worst = -1.0;
    for (size_t c = 0; c < candidates.size(); ++c) {
      double t = expected_next_use(candidates[c], incoming);
      if (t > worst || (t == worst && touched_[shard_index(candidates[c], g_.n_expert)] <
                                          touched_[shard_index(candidates[best], g_.n_expert)])) {
        worst = t;
        best = c;
      }
    }
    return best;
  }

 private:
  bool in_visit(uint32_t l) const { return visit_token_[l] == token_ && l == cur_layer_ && visits_[l] > 0; }
  bool same_token(uint32_t l) const { return visit_token_[l] == token_ && visits_[l] > 0; }
  bool previous_token(uint32_t l) const { return visits_[l] > 0 && visit_token_[l] + 1 == token_; }
  // A step of a prefill or multi-sequence batch routes many tokens at once; the token-to-token
  // counts and evidence are for single tokens (decode of one sequence), so larger sets are skipped.
  bool one_token(const std::vector<uint32_t>& set) const { return set.size() <= g_.n_expert_used; }

  void start_visit(uint32_t l) {
    cur_layer_ = l;
    // The previous token's experts at l, for the token-to-token counts of this visit.
    if (previous_token(l)) prev_sets_[l].swap(token_sets_[l]);
    else prev_sets_[l].clear();
    if (use_next_ && one_token(prev_sets_[l])) {
      for (uint32_t from : prev_sets_[l]) next_src_[static_cast<size_t>(l) * g_.n_expert + from] += 1.0;
    }
    visit_token_[l] = token_;
    const uint64_t v = ++visits_[l];
    token_sets_[l].clear();
    pred_valid_ = false;
    // Every expert of the layer is a trial at this visit, keyed by its gap before the visit.
    for (uint32_t e = 0; e < g_.n_expert; ++e) {
      const size_t i = static_cast<size_t>(l) * g_.n_expert + e;
      const uint32_t gap =
          last_use_[i] == 0 ? kMaxGap : static_cast<uint32_t>(std::min<uint64_t>(v - 1 - last_use_[i], kMaxGap));
      gap_at_visit_[i] = gap;
      trials_[gap] += 1.0;
    }
    if (use_transitions_ && l > 0 && same_token(l - 1)) {
      for (uint32_t from : token_sets_[l - 1]) trans_src_[static_cast<size_t>(l) * g_.n_expert + from] += 1.0;
    }
  }

  // pred_[h * E + j]: probability that this token uses expert j at layer cur + h (h >= 1).
  void predict_ahead(ShardKey incoming) {
    const uint32_t E = g_.n_expert, K = g_.n_expert_used, c = cur_layer_;
    std::vector<uint32_t>& known = known_;  // a member: no allocation per miss
    known.assign(token_sets_[c].begin(), token_sets_[c].end());
    if (std::find(known.begin(), known.end(), incoming.expert) == known.end()) known.push_back(incoming.expert);
    if (pred_valid_ && pred_known_ == known.size()) return;
    pred_valid_ = true;
    pred_known_ = known.size();
    std::fill(pred_.begin(), pred_.end(), 0.0);
    for (uint32_t e : known) pred_[e] = static_cast<double>(K) / known.size();  // h = 0: mass K
    for (uint32_t h = 1; h <= horizon_ && c + h < g_.n_layer; ++h) {
      const uint32_t l = c + h;
      const double* prev = &pred_[(h - 1) * E];
      double* out = &pred_[h * E];
      for (uint32_t i = 0; i < E; ++i) {
        if (prev[i] == 0) continue;
        const size_t row = (static_cast<size_t>(l) * E + i) * E;
        const double denom = trans_src_[static_cast<size_t>(l) * E + i] + kTransitionPrior;
        const double w = prev[i] / K;
        for (uint32_t j = 0; j < E; ++j) out[j] += w * (trans_[row + j] + kTransitionPrior * base_) / denom;
      }
    }
  }

  // Probability from recency (gap bucket) and relative frequency alone. The frequency factor
  // ((used + 1) / (mean + 1))^freq_weight is kept as its two powers, each updated when its count
  // changes: a miss scores every cached shard, and a pow per shard was most of the policy's cost.
  double reuse_probability(size_t i, uint32_t layer, uint32_t gap) const {
    double p = hits_[gap] / trials_[gap];
    if (freq_weight_ != 0.0 && layer_count_[layer] > 0) p *= freq_factor_[i] / layer_scale_[layer];
    return std::clamp(p, 1e-4, 0.9999);
  }
  void update_freq_factor(size_t i) { freq_factor_[i] = std::pow(used_count_[i] + 1.0, freq_weight_); }
  void update_layer_scale(uint32_t l) {
    layer_scale_[l] = std::pow(layer_count_[l] / g_.n_expert + 1.0, freq_weight_);
  }

  // Log-odds evidence that the next visit of k.layer uses k.expert, from the experts of the token
  // before that visit at the same layer (sum over them of log P(j | i) / (K/E)).
  // `incoming` is the shard being loaded: part of this token's set, though not yet accessed.
  double next_token_evidence(ShardKey k, ShardKey incoming) const {
    const uint32_t E = g_.n_expert, l = k.layer;
    // A layer this token has yet to visit still holds the previous token's set, if that token
    // visited it; a layer this token has visited holds this token's set.
    const bool visited_now = same_token(l);
    if (!visited_now && !previous_token(l)) return 0.0;
    if (!one_token(token_sets_[l])) return 0.0;
    auto evidence = [&](uint32_t from) {
      const size_t row = static_cast<size_t>(l) * E + from;
      const double q = (next_[row * E + k.expert] + kNextTokenPrior * base_) / (next_src_[row] + kNextTokenPrior);
      return std::log(q / base_);
    };
    double b = 0.0;
    for (uint32_t from : token_sets_[l]) b += evidence(from);
    if (visited_now && incoming.layer == l &&
        std::find(token_sets_[l].begin(), token_sets_[l].end(), incoming.expert) == token_sets_[l].end()) {
      b += evidence(incoming.expert);
    }
    return b;
  }

  double expected_next_use(ShardKey k, ShardKey incoming) const {
    const size_t i = shard_index(k, g_.n_expert);
    const uint32_t L = g_.n_layer;
    uint64_t d = (k.layer + L - cur_layer_) % L;
    if (d == 0) d = L;
    // Gap at the next visit of k.layer: visits without use since the last use.
    const uint32_t gap = last_use_[i] == 0
                             ? kMaxGap
                             : static_cast<uint32_t>(std::min<uint64_t>(visits_[k.layer] - last_use_[i], kMaxGap));
    double p = reuse_probability(i, k.layer, gap);
    const double p_later = use_next_ ? reuse_probability(i, k.layer, std::min(gap + 1, kMaxGap)) : p;
    if (use_transitions_ && k.layer > cur_layer_ && k.layer - cur_layer_ <= horizon_) {
      const double q = std::clamp(pred_[(k.layer - cur_layer_) * g_.n_expert + k.expert], 1e-4, 0.9999);
      const double odds = (q / (1 - q)) * (p / (1 - p)) / (base_ / (1 - base_));
      p = odds / (1 + odds);
    }
    if (use_next_) p = std::clamp(sigmoid(std::min(30.0, logit(p) + next_token_evidence(k, incoming))), 1e-4, 0.9999);
    return static_cast<double>(d) + L * (1.0 - p) / p_later;
  }

  ExpertProfile profile_;
  double freq_weight_;
  uint32_t horizon_;
  double profile_tokens_;
  PolicyGeometry g_;
  double base_ = 0;
  uint64_t token_ = 1;
  uint32_t cur_layer_ = 0;
  uint64_t tick_ = 0;
  std::vector<uint64_t> visits_;
  std::vector<uint64_t> visit_token_;
  std::vector<uint64_t> last_use_;      // visit index of last use, 0 = never
  std::vector<uint64_t> touched_;       // tick of last access or load, for tie-breaks
  std::vector<uint32_t> gap_at_visit_;  // gap bucket at the start of the current visit
  std::vector<double> used_count_;
  std::vector<double> layer_count_;
  std::vector<double> freq_factor_;  // (used_count_ + 1)^freq_weight, per shard
  std::vector<double> layer_scale_;  // (layer_count_ / n_expert + 1)^freq_weight, per layer
  std::vector<uint32_t> known_;      // predict_ahead's scratch
  std::vector<double> trials_;
  std::vector<double> hits_;
  std::vector<std::vector<uint32_t>> token_sets_;  // experts this token used per layer so far
  std::vector<std::vector<uint32_t>> prev_sets_;   // the previous token's, during a visit
  bool next_token_ = true;
  bool use_next_ = false;
  std::vector<double> next_;       // [L, E, E] token-to-token counts
  std::vector<double> next_src_;   // [L, E]
  bool use_transitions_ = false;
  std::vector<double> trans_;      // [L, E, E]
  std::vector<double> trans_src_;  // [L, E]
  std::vector<double> pred_;       // [horizon + 1, E]
  bool pred_valid_ = false;
  size_t pred_known_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_predict_policy(const ExpertProfile* profile, double freq_weight,
                                                    uint32_t horizon, double profile_tokens, bool next_token) {
  return std::make_unique<PredictPolicy>(profile, freq_weight, horizon, profile_tokens, next_token);
}

}  // namespace sluice::cache
