// Pinned hot set: the hot_fraction * capacity shards a profile says are used most are never
// chosen while any other candidate exists; the rest of the cache is LRU. Hot shards are not
// preloaded (no bypass, no speculative reads): they enter on first use and then stay.
#include <algorithm>
#include <limits>
#include <numeric>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

class HotPinPolicy final : public EvictionPolicy {
 public:
  HotPinPolicy(const ExpertProfile& profile, double hot_fraction)
      : profile_(profile), hot_fraction_(hot_fraction) {}
  std::string_view name() const override { return "hot-pin"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    last_.assign(g.n_shards(), 0);
    tick_ = 0;
    hot_.assign(g.n_shards(), false);
    std::vector<size_t> order(g.n_shards());
    std::iota(order.begin(), order.end(), size_t{0});
    auto count = [&](size_t i) {
      return profile_.n_expert == g.n_expert && i < profile_.counts.size() ? profile_.counts[i] : 0.0;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return count(a) > count(b); });
    size_t n_hot = std::min<size_t>(order.size(), static_cast<size_t>(hot_fraction_ * g.capacity_slots));
    for (size_t i = 0; i < n_hot; ++i) hot_[order[i]] = true;
  }
  void on_access(ShardKey key, bool) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  void on_insert(ShardKey key) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    size_t best = SIZE_MAX;
    std::pair<bool, uint64_t> best_rank{true, std::numeric_limits<uint64_t>::max()};
    for (size_t i = 0; i < candidates.size(); ++i) {
      size_t k = shard_index(candidates[i], n_expert_);
      std::pair<bool, uint64_t> rank{hot_[k], last_[k]};
      if (best == SIZE_MAX || rank < best_rank) best = i, best_rank = rank;
    }
    return best;
  }

 private:
  ExpertProfile profile_;
  double hot_fraction_;
  uint32_t n_expert_ = 0;
  std::vector<uint64_t> last_;
  uint64_t tick_ = 0;
  std::vector<bool> hot_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_hot_pin_policy(const ExpertProfile& profile, double hot_fraction) {
  return std::make_unique<HotPinPolicy>(profile, hot_fraction);
}

}  // namespace sluice::cache
