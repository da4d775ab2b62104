#include "cache/warm_start.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <numeric>
#include <string>

#include "common/error.h"

namespace sluice::cache {

namespace {
// Enough reads in flight to keep an NVMe queue busy; few enough that pins stay cheap.
constexpr size_t kInFlight = 32;

uint64_t shard_bytes(const ShardLayout& layout, uint32_t layer) {
  uint64_t b = 0;
  for (const auto& t : layout.layers[layer].tensors) b += t.expert_bytes;
  return b;
}
}  // namespace

std::vector<ShardKey> rank_by_use(const ExpertProfile& profile) {
  std::vector<size_t> order(profile.counts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Stable over the dense index (layer-major): ties keep lower layer, then lower expert first.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return profile.counts[a] > profile.counts[b]; });
  std::vector<ShardKey> keys;
  for (size_t i : order) {
    if (profile.counts[i] <= 0) break;
    keys.push_back(ShardKey{static_cast<uint32_t>(i / profile.n_expert), static_cast<uint32_t>(i % profile.n_expert)});
  }
  return keys;
}

void check_profile_matches(const ExpertProfile& profile, uint32_t n_layer, uint32_t n_expert, std::string_view name) {
  if (profile.n_layer != n_layer || profile.n_expert != n_expert) {
    throw Error(ErrorCode::invalid_argument,
                "profile '" + std::string(name) + "' is for " + std::to_string(profile.n_layer) + " MoE layers x " +
                    std::to_string(profile.n_expert) + " experts, but the model has " + std::to_string(n_layer) +
                    " x " + std::to_string(n_expert) + "; record a profile on this model (--profile-out)");
  }
}

WarmResult warm_start(ShardCache& cache, std::span<const ShardKey> ranked,
                      const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const ShardLayout& layout = cache.layout();
  const CachePlan& plan = cache.plan();
  for (ShardKey k : ranked) {
    if (k.layer >= layout.n_layer() || k.expert >= layout.n_expert) {
      throw Error(ErrorCode::invalid_argument, "warm start: " + to_string(k) + " is outside the model");
    }
  }
  // The shards that will fit, in rank order (the cache is normally empty at start-up).
  std::vector<uint64_t> room(plan.classes.size());
  for (size_t c = 0; c < room.size(); ++c) room[c] = plan.classes[c].n_slots;
  std::vector<ShardKey> todo;
  uint64_t total = 0;
  for (ShardKey k : ranked) {
    uint64_t& r = room[plan.class_of_layer[k.layer]];
    if (r == 0 || cache.is_resident(k)) continue;
    --r;
    todo.push_back(k);
    total += shard_bytes(layout, k.layer);
  }

  WarmResult result;
  std::deque<ShardCache::Pin> flight;
  auto land_one = [&] {
    ShardCache::Pin& pin = flight.front();
    cache.wait(pin);
    result.bytes += shard_bytes(layout, pin.key().layer);
    ++result.shards;
    flight.pop_front();  // releases the pin: resident, evictable as the policy decides
    if (progress) progress(result.bytes, total);
  };
  // Lowest-ranked first: recency policies (LRU and kin) then see the hottest shards as the most
  // recently inserted and evict them last.
  for (auto it = todo.rbegin(); it != todo.rend(); ++it) {
    ShardCache::Pin pin = cache.preload(*it);
    if (!pin) continue;
    flight.push_back(std::move(pin));
    if (flight.size() >= kInFlight) land_one();
  }
  while (!flight.empty()) land_one();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace sluice::cache
