#include "core/experts/expert_partition.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "cache/trace.h"
#include "common/error.h"

namespace sluice::core {

namespace {
const char* kFlag = "--expert-partition";

void check_shape(const cache::ExpertProfile& p, const ExpertGeometry& g, int n_ranks, std::string_view name) {
  const int64_t n_moe = std::count(g.moe_layer.begin(), g.moe_layer.end(), true);
  if (static_cast<int64_t>(p.n_layer) != n_moe || static_cast<int64_t>(p.n_expert) != g.n_expert)
    throw Error(ErrorCode::invalid_argument,
                std::string(kFlag) + ": profile '" + std::string(name) + "' is for " + std::to_string(p.n_layer) +
                    " MoE layers x " + std::to_string(p.n_expert) + " experts, but the model has " +
                    std::to_string(n_moe) + " x " + std::to_string(g.n_expert) +
                    "; record a profile on this model (--profile-out)");
  if (std::all_of(p.counts.begin(), p.counts.end(), [](double c) { return c == 0; }))
    throw Error(ErrorCode::invalid_argument, std::string(kFlag) + ": profile '" + std::string(name) +
                                                 "' has no expert use counts (recorded over no tokens?); record one "
                                                 "with --profile-out on a run that generates tokens");
  if (n_ranks < 1) throw Error(ErrorCode::internal, "expert partition over " + std::to_string(n_ranks) + " ranks");
}

// One MoE layer: owners[e] for counts[e], the greedy deal of the header.
void deal_layer(std::span<const double> counts, int n_ranks, std::span<int32_t> owners, std::span<int32_t> order,
                std::span<double> mass, std::span<int64_t> room) {
  const int64_t X = static_cast<int64_t>(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
  for (int r = 0; r < n_ranks; ++r) {
    mass[r] = 0;
    room[r] = X / n_ranks + (r < X % n_ranks ? 1 : 0);
  }
  for (int32_t e : order) {
    int best = -1;
    for (int r = 0; r < n_ranks; ++r)
      if (room[r] > 0 && (best < 0 || mass[r] < mass[best])) best = r;
    owners[e] = best;
    mass[best] += counts[e];
    --room[best];
  }
}
}  // namespace

ExpertPartition balanced_partition(const cache::ExpertProfile& profile, const ExpertGeometry& geometry, int n_ranks,
                                   int rank, std::string_view name) {
  check_shape(profile, geometry, n_ranks, name);
  const size_t X = static_cast<size_t>(geometry.n_expert), R = static_cast<size_t>(n_ranks);
  ExpertPartition p{n_ranks, rank, geometry.n_expert, std::vector<int32_t>(geometry.moe_layer.size() * X)};
  std::vector<int32_t> order(X);
  std::vector<double> mass(R);
  std::vector<int64_t> room(R);
  size_t moe = 0;
  for (size_t il = 0; il < geometry.moe_layer.size(); ++il) {
    const std::span<int32_t> owners{p.owners.data() + il * X, X};
    if (!geometry.moe_layer[il]) {
      for (size_t e = 0; e < X; ++e) owners[e] = static_cast<int32_t>(e % R);
      continue;
    }
    deal_layer({profile.counts.data() + moe * X, X}, n_ranks, owners, order, mass, room);
    ++moe;
  }
  return p;
}

cache::ExpertProfile read_partition_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, std::string(kFlag) + ": cannot read profile '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return cache::parse_profile(text.str(), path);
}

double owned_share(const ExpertPartition& partition, const ExpertGeometry& geometry) {
  int64_t owned = 0, all = 0;
  for (size_t il = 0; il < geometry.moe_layer.size(); ++il) {
    if (!geometry.moe_layer[il]) continue;
    owned += partition.owned_count(static_cast<int>(il), geometry.n_expert, partition.rank);
    all += geometry.n_expert;
  }
  return all > 0 ? static_cast<double>(owned) / static_cast<double>(all) : 1.0;
}

}  // namespace sluice::core
