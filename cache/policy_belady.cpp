// Belady's MIN: evict the candidate whose next use lies farthest in the future (never used
// again first). Clairvoyant, so only the simulator can run it; it is the upper bound `sluice
// tune` compares against. The future must be exactly the sequence of on_access keys.
#include <algorithm>
#include <limits>

#include "cache/eviction_policy.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

class BeladyPolicy final : public EvictionPolicy {
 public:
  explicit BeladyPolicy(std::span<const ShardKey> future) : future_(future.begin(), future.end()) {}
  std::string_view name() const override { return "belady"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    pos_ = 0;
    occ_.assign(g.n_shards(), {});
    for (size_t p = 0; p < future_.size(); ++p) {
      const ShardKey& k = future_[p];
      if (k.layer >= g.n_layer || k.expert >= g.n_expert) {
        throw Error(ErrorCode::invalid_argument, "belady: future access #" + std::to_string(p) +
                                                     " (" + to_string(k) + ") is outside the model");
      }
      occ_[shard_index(k, n_expert_)].push_back(p);
    }
  }
  void on_access(ShardKey key, bool) override {
    if (pos_ >= future_.size() || future_[pos_] != key) {
      throw Error(ErrorCode::internal,
                  "belady: access #" + std::to_string(pos_) + " is " + to_string(key) +
                      " but the future sequence says " +
                      (pos_ < future_.size() ? to_string(future_[pos_]) : std::string("nothing")));
    }
    ++pos_;
  }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    size_t best = 0;
    uint64_t farthest = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto& o = occ_[shard_index(candidates[i], n_expert_)];
      auto it = std::lower_bound(o.begin(), o.end(), pos_);
      uint64_t next = it == o.end() ? std::numeric_limits<uint64_t>::max() : *it;
      if (i == 0 || next > farthest) farthest = next, best = i;
    }
    return best;
  }

 private:
  std::vector<ShardKey> future_;
  uint32_t n_expert_ = 0;
  size_t pos_ = 0;
  std::vector<std::vector<size_t>> occ_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_belady_policy(std::span<const ShardKey> future) {
  return std::make_unique<BeladyPolicy>(future);
}

}  // namespace sluice::cache
