// Balanced expert partition for `--expert-parallel --expert-partition PROFILE` (issue #25;
// docs/scale-out.md).
//
// The static partition (expert e -> rank e mod N) gives every rank 1/N of each layer's experts
// but not 1/N of their use: routing is skewed, so one rank can own more of the hot experts, need
// more cache for them and miss more. A profile (`sluice run|bench --profile-out`, `sluice tune
// --profile-out`; format in cache/trace.h) counts how often each (MoE layer, expert) was chosen.
// balanced_partition() deals each MoE layer's experts so every rank gets the same number of
// experts as the static partition does (n_expert / N, the first n_expert % N ranks one more) and
// as equal a use mass as a greedy deal allows:
//
//   experts by count, descending (ties: lower expert id first); each goes to the rank with the
//   least mass so far among those below their count (ties: lower rank).
//
// Blocks without routed experts keep the static owners (nothing asks them). The result depends
// only on the counts, N and the geometry, so every rank computes the same table from the same
// file without a message. Table layout: ExpertPartition (core/experts/expert_exchange.h).
#pragma once

#include <string>
#include <string_view>

#include "cache/eviction_policy.h"
#include "core/experts/expert_exchange.h"
#include "core/experts/streamed_experts.h"

namespace sluice::core {

// Error(invalid_argument) naming `name` when the profile's MoE layer or expert count differs from
// the geometry's, or when it holds no use counts at all (nothing to balance by).
ExpertPartition balanced_partition(const cache::ExpertProfile& profile, const ExpertGeometry& geometry, int n_ranks,
                                   int rank, std::string_view name);

// Reads and parses the profile file; Error(invalid_argument) when it cannot be read, and the
// parser's Error (file, line, what was expected) when it is malformed.
cache::ExpertProfile read_partition_profile(const std::string& path);

// The share of the model's routed experts (over all MoE blocks) that `partition.rank` owns.
double owned_share(const ExpertPartition& partition, const ExpertGeometry& geometry);

}  // namespace sluice::core
