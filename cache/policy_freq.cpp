// Frequency-weighted (LRFU, Lee et al. 2001): every past use contributes 2^(-λ·age_in_tokens)
// to a shard's score; evict the lowest score. λ -> 0 is LFU, large λ is LRU at token grain.
// Ties (same score, e.g. shards used at the same token) go to the least recent access.
#include <cmath>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

class FreqPolicy final : public EvictionPolicy {
 public:
  explicit FreqPolicy(double lambda) : lambda_(lambda) {}
  std::string_view name() const override { return "freq"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    crf_.assign(g.n_shards(), 0.0);
    last_token_.assign(g.n_shards(), 0);
    last_.assign(g.n_shards(), 0);
    tick_ = 0;
    token_ = 0;
    decay_.resize(kDecayTable);
    for (size_t a = 0; a < kDecayTable; ++a) decay_[a] = std::exp2(-lambda_ * static_cast<double>(a));
  }
  void on_token() override { ++token_; }
  void on_access(ShardKey key, bool) override {
    size_t i = shard_index(key, n_expert_);
    crf_[i] = 1.0 + score(i);
    last_token_[i] = token_;
    last_[i] = ++tick_;
  }
  void on_insert(ShardKey key) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    size_t best = 0;
    double s_best = score(shard_index(candidates[0], n_expert_));
    for (size_t i = 1; i < candidates.size(); ++i) {
      size_t k = shard_index(candidates[i], n_expert_);
      double s = score(k);
      if (s < s_best || (s == s_best && last_[k] < last_[shard_index(candidates[best], n_expert_)])) {
        best = i;
        s_best = s;
      }
    }
    return best;
  }

 private:
  // Ages are whole tokens, so the decay of the usual ones comes from a table: a miss scores
  // every cached shard, and an exp2 per shard was most of this policy's cost.
  static constexpr size_t kDecayTable = 1024;
  double score(size_t i) const {
    const uint64_t age = token_ - last_token_[i];
    return crf_[i] * (age < kDecayTable ? decay_[age] : std::exp2(-lambda_ * static_cast<double>(age)));
  }
  double lambda_;
  uint32_t n_expert_ = 0;
  std::vector<double> decay_;  // decay_[a] = 2^(-lambda a)
  std::vector<double> crf_;
  std::vector<uint64_t> last_token_;
  std::vector<uint64_t> last_;
  uint64_t tick_ = 0;
  uint64_t token_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_freq_policy(double lambda) {
  return std::make_unique<FreqPolicy>(lambda);
}

}  // namespace sluice::cache
