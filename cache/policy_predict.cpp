// Predicted next use ("predict"): evict the candidate expected to be needed last, Belady's rule
// with the future replaced by an estimate built from two things real routing shows:
//
// * Layers are visited cyclically, once per token. A shard of layer l is next wanted at layer
//   l's next visit, d = (l - current_layer) mod n_layer steps away (n_layer for the current
//   layer). Plain LRU gets this backwards: the layer just computed holds the youngest shards,
//   though they are the ones needed last.
// * Temporal reuse: an expert used g visits ago is reused at the next visit with probability
//   p(g), well above chance for small g (README: 0.39 vs 0.27 for Mixtral). p(g) is counted
//   online from the accesses themselves (every visit is a trial for every expert of the layer),
//   seeded by a profile's reuse counts when one is given, and scaled by the expert's relative
//   use frequency^freq_weight.
//
// If each future visit used the shard independently with probability p, its next use would be
// d + n_layer * (1 - p) / p steps away; the candidate with the largest value goes.
#include <algorithm>
#include <cmath>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

constexpr uint32_t kMaxGap = kMaxReuseGap;
constexpr uint32_t kMaxRun = 8;

class PredictPolicy final : public EvictionPolicy {
 public:
  PredictPolicy(const ExpertProfile* profile, double freq_weight, int score, bool runs)
      : freq_weight_(freq_weight), score_(score), runs_(runs) {
    if (profile != nullptr && !profile->empty()) profile_ = *profile;
  }
  std::string_view name() const override { return "predict"; }

  void reset(const PolicyGeometry& g) override {
    g_ = g;
    token_ = 1;
    cur_layer_ = 0;
    visits_.assign(g.n_layer, 0);
    visit_token_.assign(g.n_layer, 0);
    last_use_.assign(g.n_shards(), 0);
    touched_.assign(g.n_shards(), 0);
    tick_ = 0;
    run_.assign(g.n_shards(), 0);
    run_trials_.assign(kMaxRun + 1, 4.0);
    run_hits_.assign(kMaxRun + 1, 4.0 * static_cast<double>(g.n_expert_used) / std::max(1u, g.n_expert));
    gap_at_visit_.assign(g.n_shards(), kMaxGap);
    used_count_.assign(g.n_shards(), 0.0);
    layer_count_.assign(g.n_layer, 0.0);
    // Prior: chance level K/E with the weight of a few trials, plus the profile's counts.
    double base = g.n_expert ? static_cast<double>(g.n_expert_used) / g.n_expert : 0.0;
    trials_.assign(kMaxGap + 1, 4.0);
    hits_.assign(kMaxGap + 1, 4.0 * base);
    bool use_profile = profile_.n_layer == g.n_layer && profile_.n_expert == g.n_expert;
    if (use_profile) {
      for (size_t b = 0; b <= kMaxGap && b < profile_.reuse_trials.size(); ++b) {
        trials_[b] += profile_.reuse_trials[b];
        hits_[b] += profile_.reuse_hits[b];
      }
      for (size_t i = 0; i < g.n_shards(); ++i) {
        used_count_[i] = profile_.counts[i];
        layer_count_[i / g.n_expert] += profile_.counts[i];
      }
    }
  }

  void on_token() override { ++token_; }
  void on_insert(ShardKey key) override { touched_[shard_index(key, g_.n_expert)] = ++tick_; }

  void on_access(ShardKey key, bool) override {
    uint32_t l = key.layer;
    if (visit_token_[l] != token_ || l != cur_layer_) start_visit(l);
    size_t i = shard_index(key, g_.n_expert);
    touched_[i] = ++tick_;
    if (last_use_[i] != visits_[l]) {  // first use in this visit: a reuse success
      hits_[gap_at_visit_[i]] += 1.0;
      if (gap_at_visit_[i] == 0) run_hits_[std::min(run_[i], kMaxRun)] += 1.0;
      run_[i] = gap_at_visit_[i] == 0 ? run_[i] + 1 : 1;
      last_use_[i] = visits_[l];
      used_count_[i] += 1.0;
      layer_count_[l] += 1.0;
    }
  }

  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    // Ties (common: equal gaps, equal distance) go to the least recently touched shard, so the
    // choice never depends on the order of `candidates`.
    size_t best = 0;
    double worst = -1.0;
    for (size_t c = 0; c < candidates.size(); ++c) {
      double t = expected_next_use(candidates[c]);
      if (t > worst || (t == worst && touched_[shard_index(candidates[c], g_.n_expert)] <
                                          touched_[shard_index(candidates[best], g_.n_expert)])) {
        worst = t;
        best = c;
      }
    }
    return best;
  }

 private:
  void start_visit(uint32_t l) {
    cur_layer_ = l;
    visit_token_[l] = token_;
    uint64_t v = ++visits_[l];
    // Every expert of the layer is a trial at this visit, keyed by its gap before the visit.
    for (uint32_t e = 0; e < g_.n_expert; ++e) {
      size_t i = static_cast<size_t>(l) * g_.n_expert + e;
      uint32_t gap = last_use_[i] == 0 ? kMaxGap
                                       : static_cast<uint32_t>(std::min<uint64_t>(v - 1 - last_use_[i], kMaxGap));
      gap_at_visit_[i] = gap;
      trials_[gap] += 1.0;
      if (gap == 0) run_trials_[std::min(run_[i], kMaxRun)] += 1.0;
    }
  }

  double expected_next_use(ShardKey k) const {
    size_t i = shard_index(k, g_.n_expert);
    uint32_t L = g_.n_layer;
    uint64_t d = (k.layer + L - cur_layer_) % L;
    if (d == 0) d = L;
    // gap at the next visit of k.layer: visits without use since the last use.
    uint32_t gap = last_use_[i] == 0
                       ? kMaxGap
                       : static_cast<uint32_t>(std::min<uint64_t>(visits_[k.layer] - last_use_[i], kMaxGap));
    double p = hits_[gap] / trials_[gap];
    if (runs_ && gap == 0) {
      uint32_t r = std::min(run_[i], kMaxRun);
      p = run_hits_[r] / run_trials_[r];
    }
    if (freq_weight_ != 0.0 && layer_count_[k.layer] > 0) {
      double mean = layer_count_[k.layer] / g_.n_expert;
      p *= std::pow((used_count_[i] + 1.0) / (mean + 1.0), freq_weight_);
    }
    p = std::clamp(p, 1e-4, 1.0);
    if (score_ == 1) return static_cast<double>(d) / p;
    return static_cast<double>(d) + L * (1.0 - p) / p;
  }

  ExpertProfile profile_;
  double freq_weight_;
  int score_;
  bool runs_;
  std::vector<uint32_t> run_;             // consecutive visits used, ending at last_use_
  std::vector<double> run_trials_, run_hits_;  // gap-0 reuse by run length
  PolicyGeometry g_;
  uint64_t token_ = 1;
  uint32_t cur_layer_ = 0;
  std::vector<uint64_t> visits_;
  std::vector<uint64_t> visit_token_;
  std::vector<uint64_t> last_use_;      // visit index of last use, 0 = never
  std::vector<uint64_t> touched_;       // tick of last access or load, for tie-breaks
  uint64_t tick_ = 0;
  std::vector<uint32_t> gap_at_visit_;  // gap bucket at the start of the current visit
  std::vector<double> used_count_;
  std::vector<double> layer_count_;
  std::vector<double> trials_;
  std::vector<double> hits_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_predict_policy(const ExpertProfile* profile, double freq_weight, int score,
                                                    bool runs) {
  return std::make_unique<PredictPolicy>(profile, freq_weight, score, runs);
}

}  // namespace sluice::cache
