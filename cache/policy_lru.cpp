// LRU: evict the candidate whose last use (or load) is oldest.
#include <limits>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    last_.assign(g.n_shards(), 0);
    tick_ = 0;
  }
  void on_access(ShardKey key, bool) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  void on_insert(ShardKey key) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    size_t best = 0;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < candidates.size(); ++i) {
      uint64_t t = last_[shard_index(candidates[i], n_expert_)];
      if (t < oldest) oldest = t, best = i;
    }
    return best;
  }

 private:
  uint32_t n_expert_ = 0;
  std::vector<uint64_t> last_;
  uint64_t tick_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru_policy() { return std::make_unique<LruPolicy>(); }

}  // namespace sluice::cache
