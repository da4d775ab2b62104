#include "cache/cache_simulator.h"

#include "common/error.h"

namespace sluice::cache {

void SimResult::add(const SimResult& o) {
  hits += o.hits;
  misses += o.misses;
  evictions += o.evictions;
  tokens += o.tokens;
  if (layers.size() < o.layers.size()) layers.resize(o.layers.size());
  for (size_t l = 0; l < o.layers.size(); ++l) {
    layers[l].hits += o.layers[l].hits;
    layers[l].misses += o.layers[l].misses;
  }
}

SimResult simulate_sequence(const Trace& trace, size_t seq, EvictionPolicy& policy, uint64_t capacity_slots) {
  const TraceHeader& h = trace.header;
  if (capacity_slots < h.topk) {
    throw Error(ErrorCode::budget, "a cache of " + std::to_string(capacity_slots) +
                                       " shards cannot hold the " + std::to_string(h.topk) +
                                       " experts one token uses per layer; the minimum is " +
                                       std::to_string(h.topk) + " shards");
  }
  PolicyGeometry g{h.n_layer, h.n_expert, h.topk, capacity_slots};
  policy.reset(g);
  SimResult r;
  r.policy = std::string(policy.name());
  r.capacity_slots = capacity_slots;
  r.layers.resize(h.n_layer);

  const size_t n = trace.n_shards();
  std::vector<int64_t> where(n, -1);  // position in `resident`, -1 when absent
  std::vector<ShardKey> resident;
  std::vector<uint8_t> pinned(n, 0);
  std::vector<ShardKey> candidates;
  resident.reserve(capacity_slots);

  const TraceSequence& s = trace.sequences.at(seq);
  for (uint32_t t = 0; t < s.n_token; ++t) {
    policy.on_token();
    ++r.tokens;
    for (uint32_t l = 0; l < h.n_layer; ++l) {
      auto step = trace.step(seq, t, l);
      for (uint32_t e : step) {
        size_t i = shard_index({l, e}, h.n_expert);
        if (where[i] >= 0) pinned[i] = 1;
      }
      for (uint32_t e : step) {
        ShardKey key{l, e};
        size_t i = shard_index(key, h.n_expert);
        if (where[i] >= 0) {
          ++r.hits;
          ++r.layers[l].hits;
          policy.on_access(key, true);
          continue;
        }
        ++r.misses;
        ++r.layers[l].misses;
        if (resident.size() >= capacity_slots) {
          candidates.clear();
          for (ShardKey k : resident) {
            if (!pinned[shard_index(k, h.n_expert)]) candidates.push_back(k);
          }
          // Cannot be empty: at most K-1 other shards are pinned and capacity >= K.
          size_t v = policy.choose_victim(candidates, key);
          if (v >= candidates.size()) {
            throw Error(ErrorCode::internal, "policy '" + r.policy + "' chose victim " + std::to_string(v) +
                                                 " of " + std::to_string(candidates.size()));
          }
          ShardKey victim = candidates[v];
          size_t vi = shard_index(victim, h.n_expert);
          int64_t pos = where[vi];
          resident[pos] = resident.back();
          where[shard_index(resident[pos], h.n_expert)] = pos;
          resident.pop_back();
          where[vi] = -1;
          ++r.evictions;
          policy.on_evict(victim);
        }
        where[i] = static_cast<int64_t>(resident.size());
        resident.push_back(key);
        pinned[i] = 1;
        policy.on_insert(key);
        policy.on_access(key, false);
      }
      for (uint32_t e : step) pinned[shard_index({l, e}, h.n_expert)] = 0;
    }
  }
  return r;
}

SimResult evaluate_policy(const Trace& trace, std::string_view policy, uint64_t capacity_slots,
                          PolicyOptions options) {
  SimResult total;
  total.policy = std::string(policy);
  total.capacity_slots = capacity_slots;
  total.layers.resize(trace.header.n_layer);
  const bool needs_profile = policy_needs_profile(policy);
  const bool clairvoyant = policy_is_clairvoyant(policy);
  for (size_t s = 0; s < trace.sequences.size(); ++s) {
    ExpertProfile profile;
    std::vector<ShardKey> future;
    PolicyOptions o = options;
    if (needs_profile && options.learn_profile) {
      std::vector<size_t> others;
      for (size_t j = 0; j < trace.sequences.size(); ++j) {
        if (j != s) others.push_back(j);
      }
      if (!others.empty()) profile = build_profile(trace, others);
      o.profile = &profile;
      if (profile.empty() && policy == "hot-pin") {
        throw Error(ErrorCode::invalid_argument,
                    "policy 'hot-pin' is learned from the trace and scored leave-one-sequence-out: "
                    "the trace needs at least 2 sequences");
      }
    }
    if (clairvoyant) {
      future = access_sequence(trace, s);
      o.future = future;
    }
    auto p = make_policy(policy, o);
    total.add(simulate_sequence(trace, s, *p, capacity_slots));
  }
  return total;
}

}  // namespace sluice::cache
