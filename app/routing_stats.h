// RoutingStats: how a model's router spreads tokens over experts, measured from real decisions.
//
// Fed one routing decision per (token, MoE layer), it reports per-layer figures averaged over
// layers, defined as in shared/traces/README.md so synthetic and real models compare directly:
//   entropy             H(usage share) / log2(n_expert): 1 = perfectly uniform use
//   hottest_over_uniform  the most used expert's share x n_expert
//   temporal_reuse      |experts(t) ∩ experts(t-1)| / k at the same layer, averaged over t >= 1
//   temporal_reuse_chance  the same overlap expected between independent tokens with the
//                       layer's usage skew: sum_e q_e^2 / k, q_e = P(e selected by a token)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice::core {

class RoutingStats {
 public:
  RoutingStats(int n_moe_layers, int n_expert, int k);
  // Decisions of consecutive tokens must arrive in token order per layer.
  void add(int moe_layer, std::span<const int32_t> experts);
  void reset_sequence();  // the next token starts a new sequence (no reuse across it)

  double entropy() const;
  double hottest_over_uniform() const;
  double temporal_reuse() const;
  double temporal_reuse_chance() const;
  uint64_t tokens() const;

 private:
  int n_layers_, n_expert_, k_;
  std::vector<uint64_t> counts_;       // [layer][expert]
  std::vector<uint64_t> tokens_;       // per layer
  std::vector<int32_t> previous_;      // [layer][k] previous token's experts, -1 when none
  std::vector<double> reuse_sum_;      // per layer
  std::vector<uint64_t> reuse_pairs_;  // per layer
};

}  // namespace sluice::core
