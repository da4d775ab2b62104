// LFU with aging: evict the least frequently used candidate, ties to the least recent.
//
// Counts are kept for every shard (resident or not) and decay exponentially: a use weighs half
// as much after `half_life` tokens. Decay is applied lazily by growing the weight of new uses
// instead of shrinking old counts; all counts are rescaled before the weight overflows.
#include <cmath>
#include <limits>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

class LfuPolicy final : public EvictionPolicy {
 public:
  explicit LfuPolicy(double half_life) : growth_(std::exp2(1.0 / (half_life > 0 ? half_life : 1e9))) {}
  std::string_view name() const override { return "lfu"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    count_.assign(g.n_shards(), 0.0);
    last_.assign(g.n_shards(), 0);
    tick_ = 0;
    weight_ = 1.0;
  }
  void on_token() override {
    weight_ *= growth_;
    if (weight_ > 1e200) {
      for (double& c : count_) c /= weight_;
      weight_ = 1.0;
    }
  }
  void on_access(ShardKey key, bool) override {
    size_t i = shard_index(key, n_expert_);
    count_[i] += weight_;
    last_[i] = ++tick_;
  }
  void on_insert(ShardKey key) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    size_t best = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      size_t a = shard_index(candidates[i], n_expert_), b = shard_index(candidates[best], n_expert_);
      if (count_[a] < count_[b] || (count_[a] == count_[b] && last_[a] < last_[b])) best = i;
    }
    return best;
  }

 private:
  double growth_;
  uint32_t n_expert_ = 0;
  std::vector<double> count_;
  std::vector<uint64_t> last_;
  uint64_t tick_ = 0;
  double weight_ = 1.0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lfu_policy(double half_life_tokens) {
  return std::make_unique<LfuPolicy>(half_life_tokens);
}

}  // namespace sluice::cache
