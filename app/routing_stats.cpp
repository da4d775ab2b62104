#include "app/routing_stats.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace sluice::core {

RoutingStats::RoutingStats(int n_moe_layers, int n_expert, int k)
    : n_layers_(n_moe_layers), n_expert_(n_expert), k_(k),
      counts_(static_cast<size_t>(n_moe_layers) * n_expert, 0), tokens_(static_cast<size_t>(n_moe_layers), 0),
      previous_(static_cast<size_t>(n_moe_layers) * k, -1), reuse_sum_(static_cast<size_t>(n_moe_layers), 0),
      reuse_pairs_(static_cast<size_t>(n_moe_layers), 0) {
  if (n_moe_layers <= 0 || n_expert <= 0 || k <= 0 || k > n_expert) {
    throw Error(ErrorCode::invalid_argument, "RoutingStats needs layers, experts and 0 < k <= experts");
  }
}

void RoutingStats::add(int layer, std::span<const int32_t> experts) {
  if (layer < 0 || layer >= n_layers_ || static_cast<int>(experts.size()) != k_) {
    throw Error(ErrorCode::internal, "RoutingStats::add: layer " + std::to_string(layer) + " with " +
                                         std::to_string(experts.size()) + " experts");
  }
  uint64_t* counts = &counts_[static_cast<size_t>(layer) * n_expert_];
  int32_t* prev = &previous_[static_cast<size_t>(layer) * k_];
  int overlap = 0;
  bool have_prev = prev[0] >= 0;
  for (int32_t e : experts) {
    if (e < 0 || e >= n_expert_) throw Error(ErrorCode::internal, "RoutingStats::add: expert id out of range");
    ++counts[e];
    if (have_prev && std::find(prev, prev + k_, e) != prev + k_) ++overlap;
  }
  if (have_prev) {
    reuse_sum_[static_cast<size_t>(layer)] += static_cast<double>(overlap) / k_;
    ++reuse_pairs_[static_cast<size_t>(layer)];
  }
  std::copy(experts.begin(), experts.end(), prev);
  ++tokens_[static_cast<size_t>(layer)];
}

void RoutingStats::reset_sequence() { std::fill(previous_.begin(), previous_.end(), -1); }

double RoutingStats::entropy() const {
  double sum = 0;
  int used = 0;
  for (int l = 0; l < n_layers_; ++l) {
    const uint64_t* c = &counts_[static_cast<size_t>(l) * n_expert_];
    double total = 0;
    for (int e = 0; e < n_expert_; ++e) total += static_cast<double>(c[e]);
    if (total == 0) continue;
    double h = 0;
    for (int e = 0; e < n_expert_; ++e) {
      if (c[e] == 0) continue;
      double p = static_cast<double>(c[e]) / total;
      h -= p * std::log2(p);
    }
    sum += n_expert_ > 1 ? h / std::log2(static_cast<double>(n_expert_)) : 1.0;
    ++used;
  }
  return used ? sum / used : 0;
}

double RoutingStats::hottest_over_uniform() const {
  double sum = 0;
  int used = 0;
  for (int l = 0; l < n_layers_; ++l) {
    const uint64_t* c = &counts_[static_cast<size_t>(l) * n_expert_];
    double total = 0, top = 0;
    for (int e = 0; e < n_expert_; ++e) {
      total += static_cast<double>(c[e]);
      top = std::max(top, static_cast<double>(c[e]));
    }
    if (total == 0) continue;
    sum += top / total * n_expert_;
    ++used;
  }
  return used ? sum / used : 0;
}

double RoutingStats::temporal_reuse() const {
  double sum = 0;
  int used = 0;
  for (int l = 0; l < n_layers_; ++l) {
    if (reuse_pairs_[static_cast<size_t>(l)] == 0) continue;
    sum += reuse_sum_[static_cast<size_t>(l)] / static_cast<double>(reuse_pairs_[static_cast<size_t>(l)]);
    ++used;
  }
  return used ? sum / used : 0;
}

double RoutingStats::temporal_reuse_chance() const {
  double sum = 0;
  int used = 0;
  for (int l = 0; l < n_layers_; ++l) {
    const uint64_t* c = &counts_[static_cast<size_t>(l) * n_expert_];
    double t = static_cast<double>(tokens_[static_cast<size_t>(l)]);
    if (t == 0) continue;
    double s = 0;
    for (int e = 0; e < n_expert_; ++e) {
      double q = static_cast<double>(c[e]) / t;
      s += q * q;
    }
    sum += s / k_;
    ++used;
  }
  return used ? sum / used : 0;
}

uint64_t RoutingStats::tokens() const {
  return tokens_.empty() ? 0 : *std::max_element(tokens_.begin(), tokens_.end());
}

}  // namespace sluice::core
