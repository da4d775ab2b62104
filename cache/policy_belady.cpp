// Belady's MIN: evict the candidate whose next use lies farthest in the future (never used
// again first). Clairvoyant, so only the simulator can run it; it is the upper bound `sluice
// tune` compares against. The future must be exactly the sequence of on_access keys.
//
// "lookahead" is Belady with a horizon: it sees the routing of the current token and of the next
// `window` tokens only. A candidate not used within that horizon is unknown to it, and the least
// recently used such candidate goes first; only when every candidate is used within the horizon
// does the farthest next use decide. It measures how far ahead a router predictor would have to
// see, perfectly, to reach a hit rate: a bound for predictive policies, not a policy to run.
#include <algorithm>
#include <limits>

#include "cache/eviction_policy.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

constexpr uint32_t kUnbounded = 0;

class BeladyPolicy final : public EvictionPolicy {
 public:
  BeladyPolicy(std::span<const ShardKey> future, uint32_t window_tokens)
      : future_(future.begin(), future.end()), window_tokens_(window_tokens) {}
  std::string_view name() const override { return window_tokens_ == kUnbounded ? "belady" : "lookahead"; }
  void reset(const PolicyGeometry& g) override {
    n_expert_ = g.n_expert;
    pos_ = 0;
    tick_ = 0;
    last_use_.assign(g.n_shards(), 0);
    // The simulator's access sequence has exactly n_expert_used accesses per layer per token
    // (access_sequence), so position p belongs to token p / accesses_per_token_.
    accesses_per_token_ = static_cast<uint64_t>(g.n_layer) * g.n_expert_used;
    if (window_tokens_ != kUnbounded && (accesses_per_token_ == 0 || future_.size() % accesses_per_token_ != 0)) {
      throw Error(ErrorCode::invalid_argument, "lookahead: the future holds " + std::to_string(future_.size()) +
                                                   " accesses, not whole tokens of " +
                                                   std::to_string(accesses_per_token_));
    }
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
    last_use_[shard_index(key, n_expert_)] = ++tick_;
  }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey) override {
    // Accesses up to `horizon` (exclusive) are visible: the rest of this token and the window.
    const uint64_t horizon =
        window_tokens_ == kUnbounded ? std::numeric_limits<uint64_t>::max()
                                     : (pos_ / accesses_per_token_ + 1 + window_tokens_) * accesses_per_token_;
    size_t best = 0;
    uint64_t farthest = 0;
    bool best_unseen = false;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t shard = shard_index(candidates[i], n_expert_);
      const auto& o = occ_[shard];
      auto it = std::lower_bound(o.begin(), o.end(), pos_);
      const uint64_t next = it == o.end() ? std::numeric_limits<uint64_t>::max() : *it;
      if (window_tokens_ != kUnbounded && next >= horizon) {
        // Unknown to the lookahead: least recently used first, before any visible candidate.
        if (!best_unseen || last_use_[shard] < last_use_[shard_index(candidates[best], n_expert_)]) best = i;
        best_unseen = true;
        continue;
      }
      if (best_unseen) continue;
      if (i == 0 || next > farthest) farthest = next, best = i;
    }
    return best;
  }

 private:
  std::vector<ShardKey> future_;
  uint32_t window_tokens_;
  uint32_t n_expert_ = 0;
  size_t pos_ = 0;
  uint64_t accesses_per_token_ = 0;
  uint64_t tick_ = 0;
  std::vector<uint64_t> last_use_;  // tick of the last access, 0 = never
  std::vector<std::vector<size_t>> occ_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_belady_policy(std::span<const ShardKey> future) {
  return std::make_unique<BeladyPolicy>(future, kUnbounded);
}

std::unique_ptr<EvictionPolicy> make_lookahead_policy(std::span<const ShardKey> future, uint32_t window_tokens) {
  if (window_tokens == 0) throw Error(ErrorCode::invalid_argument, "lookahead: the window must be at least 1 token");
  return std::make_unique<BeladyPolicy>(future, window_tokens);
}

}  // namespace sluice::cache
