// LRU with per-layer quotas: capacity is split evenly over layers (quota[l] = slots layer l may
// keep). A layer at or over its quota replaces its own least recent shard; otherwise the least
// recent shard of a layer over its quota goes; only then global LRU. Keeps one layer's misses
// from flushing the shards every other layer will reuse at the next token, which plain LRU does
// because layers are visited cyclically.
#include <limits>

#include "cache/eviction_policy.h"

namespace sluice::cache {
namespace {

class LruQuotaPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru-quota"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    last_.assign(g.n_shards(), 0);
    tick_ = 0;
    resident_.assign(g.n_layer, 0);
    quota_.assign(g.n_layer, 0);
    for (uint32_t l = 0; l < g.n_layer; ++l) {
      quota_[l] = g.capacity_slots * (l + 1) / g.n_layer - g.capacity_slots * l / g.n_layer;
    }
  }
  void on_access(ShardKey key, bool) override { last_[shard_index(key, n_expert_)] = ++tick_; }
  void on_insert(ShardKey key) override {
    last_[shard_index(key, n_expert_)] = ++tick_;
    ++resident_[key.layer];
  }
  void on_evict(ShardKey key) override { --resident_[key.layer]; }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey incoming) override {
    size_t pick = SIZE_MAX;
    if (resident_[incoming.layer] >= quota_[incoming.layer]) {
      pick = oldest(candidates, [&](ShardKey k) { return k.layer == incoming.layer; });
    }
    if (pick == SIZE_MAX) {
      pick = oldest(candidates, [&](ShardKey k) { return resident_[k.layer] > quota_[k.layer]; });
    }
    if (pick == SIZE_MAX) pick = oldest(candidates, [](ShardKey) { return true; });
    return pick;
  }

 private:
  template <class Pred>
  size_t oldest(std::span<const ShardKey> candidates, Pred pred) const {
    size_t best = SIZE_MAX;
    uint64_t t_best = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!pred(candidates[i])) continue;
      uint64_t t = last_[shard_index(candidates[i], n_expert_)];
      if (t < t_best) t_best = t, best = i;
    }
    return best;
  }

  uint32_t n_expert_ = 0;
  std::vector<uint64_t> last_;
  uint64_t tick_ = 0;
  std::vector<uint64_t> resident_;
  std::vector<uint64_t> quota_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru_quota_policy() { return std::make_unique<LruQuotaPolicy>(); }

}  // namespace sluice::cache
