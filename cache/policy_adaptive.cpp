// Adaptive ("adaptive"): follow whichever of a few candidate policies would be hitting most now.
// The default policy: on the shared traces and on sluice's own K2/K3 traces it is within 1 point
// of the best fixed policy at every budget measured (docs/results.md), where each fixed policy
// trails the best by several points somewhere.
//
// Each candidate (lru, lfu, lru-quota, freq, predict; made by their own factories) runs twice:
// * a ghost: a metadata-only cache of the same capacity_slots that replays the access stream
//   exactly as cache_simulator.cpp does (a step's resident shards pinned, then touched in order,
//   misses evicting the ghost's own choice). Its hits, decayed with a half-life in tokens, are
//   the candidate's score;
// * a real instance: fed the real cache's events (accesses, loads, evictions), so its
//   bookkeeping describes the shards really resident. choose_victim asks the real instance of
//   the candidate with the highest score; the ghost's ranking could not be used, since the ghost
//   holds other shards.
// A ghost learns a step only once it is complete (the simulator pins all of a step's resident
// shards before its first miss), so scores lag the real cache by one step. Ties between scores go
// to the earlier candidate in the list, so a cold cache starts with predict.
//
// The choice depends only on the scores and the leader's own ranking, both independent of the
// order of `candidates`. Everything is sized in reset(); ghosts do not allocate per access.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "cache/eviction_policy.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

// Candidates in tie-break order.
constexpr const char* kCandidates[] = {"predict", "lru-quota", "lfu", "freq", "lru"};
constexpr size_t kNumCandidates = std::size(kCandidates);

// The simulator's model of a cache (cache_simulator.cpp), without data: which shards are resident.
class Ghost {
 public:
  explicit Ghost(std::unique_ptr<EvictionPolicy> policy) : policy_(std::move(policy)) {}

  void reset(const PolicyGeometry& g) {
    g_ = g;
    policy_->reset(g);
    where_.assign(g.n_shards(), -1);
    resident_.clear();
    resident_.reserve(std::min<uint64_t>(g.capacity_slots, g.n_shards()));
    n_pinned_ = 0;
    hits_ = 0;
  }
  void on_token() { policy_->on_token(); }

  // One decode step at one layer; returns its hits.
  uint64_t step(std::span<const ShardKey> keys) {
    for (ShardKey k : keys) {
      if (where_[shard_index(k, g_.n_expert)] >= 0) pin(k);
    }
    uint64_t hits = 0;
    for (ShardKey k : keys) {
      const size_t i = shard_index(k, g_.n_expert);
      if (where_[i] >= 0) {
        ++hits;
        policy_->on_access(k, true);
        continue;
      }
      if (resident_.size() >= g_.capacity_slots && !evict_one(k)) continue;  // all pinned: a step wider than the cache
      where_[i] = static_cast<int64_t>(resident_.size());
      resident_.push_back(k);  // at the tail: pinned
      ++n_pinned_;
      policy_->on_insert(k);
      policy_->on_access(k, false);
    }
    n_pinned_ = 0;
    hits_ += hits;
    return hits;
  }
  uint64_t hits() const { return hits_; }

 private:
  // resident_ keeps the step's pinned shards in its last n_pinned_ places, so the candidates
  // are its prefix: no scan per eviction (the policies break ties by their own clocks, so
  // the order of candidates does not matter).
  size_t n_unpinned() const { return resident_.size() - n_pinned_; }
  void place(size_t pos, ShardKey k) {
    resident_[pos] = k;
    where_[shard_index(k, g_.n_expert)] = static_cast<int64_t>(pos);
  }
  void pin(ShardKey k) {
    const auto pos = static_cast<size_t>(where_[shard_index(k, g_.n_expert)]);
    if (pos >= n_unpinned()) return;  // already pinned
    const size_t last = n_unpinned() - 1;
    const ShardKey other = resident_[last];
    place(last, k);
    place(pos, other);
    ++n_pinned_;
  }
  bool evict_one(ShardKey incoming) {
    const std::span<const ShardKey> candidates(resident_.data(), n_unpinned());
    if (candidates.empty()) return false;
    const size_t v = policy_->choose_victim(candidates, incoming);
    if (v >= candidates.size()) {
      throw Error(ErrorCode::internal, "adaptive: candidate '" + std::string(policy_->name()) + "' chose victim " +
                                           std::to_string(v) + " of " + std::to_string(candidates.size()));
    }
    const ShardKey victim = candidates[v];
    // Fill the hole with the last unpinned shard, and that place with the last pinned one.
    const size_t last_unpinned = n_unpinned() - 1;
    place(v, resident_[last_unpinned]);
    if (last_unpinned + 1 < resident_.size()) place(last_unpinned, resident_.back());
    resident_.pop_back();
    where_[shard_index(victim, g_.n_expert)] = -1;
    policy_->on_evict(victim);
    return true;
  }

  std::unique_ptr<EvictionPolicy> policy_;
  PolicyGeometry g_;
  std::vector<int64_t> where_;  // position in resident_, -1 when absent
  std::vector<ShardKey> resident_;
  size_t n_pinned_ = 0;
  uint64_t hits_ = 0;
};

class AdaptivePolicy final : public EvictionPolicy {
 public:
  AdaptivePolicy(const PolicyOptions& options, double half_life_tokens)
      : growth_(std::exp2(1.0 / (half_life_tokens > 0 ? half_life_tokens : 1e9))) {
    PolicyOptions o = options;
    o.future = {};
    for (const char* name : kCandidates) {
      real_.push_back(make_policy(name, o));
      ghosts_.emplace_back(make_policy(name, o));
    }
    score_.assign(kNumCandidates, 0.0);
  }
  std::string_view name() const override { return "adaptive"; }

  void reset(const PolicyGeometry& g) override {
    for (auto& p : real_) p->reset(g);
    for (auto& gh : ghosts_) gh.reset(g);
    std::fill(score_.begin(), score_.end(), 0.0);
    weight_ = 1.0;
    step_.clear();
    // A step touches each shard of its layer at most once; a longer run is cut into steps.
    step_.reserve(std::max<size_t>(g.n_expert, 1));
  }
  void on_token() override {
    flush();
    for (auto& p : real_) p->on_token();
    for (auto& gh : ghosts_) gh.on_token();
    weight_ *= growth_;
    if (weight_ > 1e200) {
      for (double& s : score_) s /= weight_;
      weight_ = 1.0;
    }
  }
  void on_access(ShardKey key, bool hit) override {
    for (auto& p : real_) p->on_access(key, hit);
    if (!step_.empty() && (key.layer != step_.front().layer || step_.size() == step_.capacity())) flush();
    step_.push_back(key);
  }
  void on_insert(ShardKey key) override {
    for (auto& p : real_) p->on_insert(key);
  }
  void on_evict(ShardKey key) override {
    for (auto& p : real_) p->on_evict(key);
  }
  size_t choose_victim(std::span<const ShardKey> candidates, ShardKey incoming) override {
    return real_[leader()]->choose_victim(candidates, incoming);
  }

  size_t leader() const {
    size_t best = 0;
    for (size_t c = 1; c < kNumCandidates; ++c) {
      if (score_[c] > score_[best]) best = c;
    }
    return best;
  }
  AdaptiveStatus status() {
    flush();
    AdaptiveStatus s;
    for (size_t c = 0; c < kNumCandidates; ++c) {
      s.candidates.emplace_back(kCandidates[c]);
      s.shadow_hits.push_back(ghosts_[c].hits());
      s.scores.push_back(score_[c] / weight_);
    }
    s.leader = leader();
    return s;
  }

 private:
  void flush() {
    if (step_.empty()) return;
    for (size_t c = 0; c < kNumCandidates; ++c) score_[c] += weight_ * static_cast<double>(ghosts_[c].step(step_));
    step_.clear();
  }

  double growth_;
  std::vector<std::unique_ptr<EvictionPolicy>> real_;
  std::vector<Ghost> ghosts_;
  std::vector<double> score_;  // decayed shadow hits, in units of weight_
  double weight_ = 1.0;
  std::vector<ShardKey> step_;  // the current step's accesses, not yet shown to the ghosts
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_adaptive_policy(const PolicyOptions& options) {
  return std::make_unique<AdaptivePolicy>(options, options.adaptive_half_life_tokens);
}

AdaptiveStatus adaptive_status(EvictionPolicy& policy) {
  auto* a = dynamic_cast<AdaptivePolicy*>(&policy);
  if (a == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                "adaptive_status: policy '" + std::string(policy.name()) + "' is not 'adaptive'");
  }
  return a->status();
}

}  // namespace sluice::cache
