#include "synth/synth_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "synth/synth_rng.h"

namespace sluice::core::synth {
namespace {

constexpr double kBiasPerSkew = 0.1;   // sigmoid: exp_probs_b std per unit of skew, in logit_std units
constexpr double kGainPerSkew = 0.06;  // softmax: log row-gain std per unit of skew

// Inverse of the standard normal CDF (Acklam's rational approximation; |error| < 1.2e-9).
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549671010929714e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - lo) return -normal_quantile(1 - p);
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Per-expert row gains (softmax models) and selection bias (sigmoid models) for a design.
void skew_terms(const RouterDesign& d, Rng& rng, std::vector<double>& gain, std::vector<float>& bias) {
  gain.assign(d.n_expert, 1.0);
  bias.assign(d.n_expert, 0.0f);
  // A selection bias matters relative to how far apart the scores are around the selection
  // threshold: sigmoid'(q) * logit_std, q = the logit quantile of the k-th of n experts.
  const double tail = std::clamp(static_cast<double>(d.n_expert_used) / d.n_expert, 0.5 / d.n_expert,
                                 1.0 - 0.5 / d.n_expert);  // all experts used: no threshold, stay finite
  const double q = d.logit_std * normal_quantile(1.0 - tail);
  const double slope = sigmoid(q) * (1.0 - sigmoid(q));
  for (uint32_t e = 0; e < d.n_expert; ++e) {
    const double z = rng.normal();
    if (d.gating == Gating::sigmoid) bias[e] = static_cast<float>(d.skew * kBiasPerSkew * slope * d.logit_std * z);
    else gain[e] = std::exp(d.skew * kGainPerSkew * z);
  }
}

// Token-part and context-part weight scales (see the header): a over every dim, b over S.
void part_scales(const RouterDesign& d, double& a, double& b) {
  const double L2 = d.logit_std * d.logit_std, k = d.ctx_dims;
  const double b2 = d.ctx_share * L2 / (k * d.ctx_std * d.ctx_std);
  const double a2 = std::max(0.0, (1.0 - d.ctx_share) * L2 - b2 * k) / d.n_embd;
  a = std::sqrt(a2);
  b = std::sqrt(b2);
}

struct Tally {
  std::vector<uint64_t> count;
  double reuse_sum = 0;
  uint64_t reuse_n = 0;
  std::vector<std::vector<int>> all;  // every token's selection, for the shuffled baseline
};

RoutingStats finish(const RouterDesign& d, Tally& t, uint64_t seed) {
  RoutingStats s;
  const double total = static_cast<double>(std::accumulate(t.count.begin(), t.count.end(), uint64_t{0}));
  double h = 0, hottest = 0;
  for (uint64_t c : t.count) {
    if (c == 0) continue;
    const double p = c / total;
    h -= p * std::log(p);
    hottest = std::max(hottest, p);
  }
  s.entropy_norm = h / std::log(static_cast<double>(d.n_expert));
  s.hottest_ratio = hottest * d.n_expert;
  s.reuse = t.reuse_n ? t.reuse_sum / t.reuse_n : 0;
  Rng rng(seed ^ 0x5A5A5A5Aull);
  double sum = 0;
  const size_t n = t.all.size();
  std::vector<char> mark(d.n_expert, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto& A = t.all[rng.next() % n];
    const auto& B = t.all[rng.next() % n];
    for (int e : A) mark[e] = 1;
    int inter = 0;
    for (int e : B) inter += mark[e];
    for (int e : A) mark[e] = 0;
    sum += static_cast<double>(inter) / d.n_expert_used;
  }
  s.reuse_shuffled = n ? sum / n : 0;
  return s;
}

void record(Tally& t, const std::vector<int>& cur, const std::vector<int>* prev, uint32_t k, std::vector<char>& mark) {
  for (int e : cur) ++t.count[e];
  if (prev) {
    for (int e : *prev) mark[e] = 1;
    int inter = 0;
    for (int e : cur) inter += mark[e];
    for (int e : *prev) mark[e] = 0;
    t.reuse_sum += static_cast<double>(inter) / k;
    ++t.reuse_n;
  }
  t.all.push_back(cur);
}

// 8 independent partial sums so the compiler can vectorize without -ffast-math.
float dot(const float* a, const float* b, uint32_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (float v : acc) s += v;
  return s;
}

void check_design(const RouterDesign& d) {
  if (d.n_expert < 2 || d.n_expert_used < 1 || d.n_expert_used > d.n_expert || d.n_embd < d.ctx_dims ||
      d.ctx_dim0 + d.ctx_dims > d.n_embd)
    throw Error(ErrorCode::invalid_argument, "router design: " + std::to_string(d.n_expert) + " experts, " +
                std::to_string(d.n_expert_used) + " used, n_embd " + std::to_string(d.n_embd) + ", context dims [" +
                std::to_string(d.ctx_dim0) + ", +" + std::to_string(d.ctx_dims) + ")");
}

}  // namespace

RouterDesign router_design(const Preset& p, uint32_t moe_layer, double skew) {
  RouterDesign d;
  d.n_embd = p.n_embd;
  d.n_expert = p.n_expert;
  d.n_expert_used = p.n_expert_used;
  d.gating = p.gating;
  d.n_group = p.n_group;
  d.n_group_used = p.n_group_used;
  d.ctx_dims = std::min<uint32_t>(32, p.n_embd);
  d.ctx_dim0 = (moe_layer * d.ctx_dims) % (p.n_embd - d.ctx_dims + 1);
  d.skew = skew;
  return d;
}

RouterWeights make_router(const RouterDesign& d, uint64_t seed) {
  check_design(d);
  Rng rng(seed);
  RouterWeights r;
  std::vector<double> gain;
  skew_terms(d, rng, gain, r.bias);
  double a, b;
  part_scales(d, a, b);
  r.w.resize(static_cast<size_t>(d.n_expert) * d.n_embd);
  for (uint32_t e = 0; e < d.n_expert; ++e) {
    float* row = &r.w[static_cast<size_t>(e) * d.n_embd];
    for (uint32_t i = 0; i < d.n_embd; ++i) row[i] = static_cast<float>(gain[e] * a * rng.normal());
    for (uint32_t i = d.ctx_dim0; i < d.ctx_dim0 + d.ctx_dims; ++i) row[i] += static_cast<float>(gain[e] * b * rng.normal());
  }
  for (float v : r.bias)
    if (!std::isfinite(v)) throw Error(ErrorCode::internal, "router design produced a non-finite exp_probs_b");
  return r;
}

void select_experts(const RouterDesign& d, std::span<const float> logits, std::span<const float> bias,
                    std::vector<int>& chosen) {
  const uint32_t E = d.n_expert, K = d.n_expert_used;
  std::vector<double> score(E);
  if (d.gating == Gating::softmax) {
    for (uint32_t e = 0; e < E; ++e) score[e] = logits[e];  // softmax is monotone
  } else {
    for (uint32_t e = 0; e < E; ++e) score[e] = sigmoid(logits[e]) + (bias.empty() ? 0.0 : bias[e]);
    if (d.n_group > 1 && d.n_group_used < d.n_group) {
      // Group-limited: a group's score is the sum of its top-2 selection scores; keep the best
      // n_group_used groups.
      const uint32_t gs = E / d.n_group;
      std::vector<std::pair<double, uint32_t>> groups;
      for (uint32_t g = 0; g < d.n_group; ++g) {
        double t1 = -1e300, t2 = -1e300;
        for (uint32_t e = g * gs; e < (g + 1) * gs; ++e) {
          if (score[e] > t1) { t2 = t1; t1 = score[e]; }
          else if (score[e] > t2) t2 = score[e];
        }
        groups.push_back({t1 + (gs > 1 ? t2 : 0.0), g});
      }
      std::partial_sort(groups.begin(), groups.begin() + d.n_group_used, groups.end(),
                        [](auto& x, auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
      std::vector<char> keep(d.n_group, 0);
      for (uint32_t i = 0; i < d.n_group_used; ++i) keep[groups[i].second] = 1;
      for (uint32_t e = 0; e < E; ++e)
        if (!keep[e / gs]) score[e] = -1e300;
    }
  }
  chosen.resize(E);
  std::iota(chosen.begin(), chosen.end(), 0);
  std::partial_sort(chosen.begin(), chosen.begin() + K, chosen.end(),
                    [&](int x, int y) { return score[x] > score[y] || (score[x] == score[y] && x < y); });
  chosen.resize(K);
}

RoutingStats estimate_routing(const RouterDesign& d, const RouterWeights& r, const HiddenProcess& hp) {
  check_design(d);
  Rng rng(hp.seed);
  Tally t;
  t.count.assign(d.n_expert, 0);
  std::vector<char> mark(d.n_expert, 0);
  std::vector<float> h(d.n_embd), logits(d.n_expert);
  std::vector<double> c(d.ctx_dims);
  const double innov = std::sqrt(1.0 - hp.rho * hp.rho);
  std::vector<int> cur, prev;
  for (uint32_t s = 0; s < hp.n_seq; ++s) {
    for (double& v : c) v = hp.ctx_std * rng.normal();
    for (uint32_t tok = 0; tok < hp.n_tok; ++tok) {
      double ss = 0;
      for (uint32_t i = 0; i < d.n_embd; ++i) h[i] = static_cast<float>(rng.normal());
      for (uint32_t j = 0; j < d.ctx_dims; ++j) h[d.ctx_dim0 + j] += static_cast<float>(c[j]);
      for (float v : h) ss += static_cast<double>(v) * v;
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / d.n_embd + 1e-6));
      for (float& v : h) v *= inv;
      for (uint32_t e = 0; e < d.n_expert; ++e) logits[e] = dot(&r.w[static_cast<size_t>(e) * d.n_embd], h.data(), d.n_embd);
      select_experts(d, logits, r.bias, cur);
      record(t, cur, tok ? &prev : nullptr, d.n_expert_used, mark);
      prev.swap(cur);
      for (double& v : c) v = hp.rho * v + innov * hp.ctx_std * rng.normal();
    }
  }
  return finish(d, t, hp.seed);
}

RoutingStats estimate_routing_fast(const RouterDesign& d, const HiddenProcess& hp) {
  check_design(d);
  Rng rng(hp.seed);
  std::vector<double> gain;
  std::vector<float> bias;
  skew_terms(d, rng, gain, bias);
  const uint32_t k = d.ctx_dims;
  std::vector<double> U(static_cast<size_t>(d.n_expert) * k);
  for (double& u : U) u = rng.normal() / std::sqrt(static_cast<double>(k));
  const double st = std::sqrt(1.0 - d.ctx_share) * d.logit_std, sc = std::sqrt(d.ctx_share) * d.logit_std;
  Tally t;
  t.count.assign(d.n_expert, 0);
  std::vector<char> mark(d.n_expert, 0);
  std::vector<float> logits(d.n_expert);
  std::vector<double> c(k);
  const double innov = std::sqrt(1.0 - hp.rho * hp.rho);
  std::vector<int> cur, prev;
  for (uint32_t s = 0; s < hp.n_seq; ++s) {
    for (double& v : c) v = rng.normal();
    for (uint32_t tok = 0; tok < hp.n_tok; ++tok) {
      for (uint32_t e = 0; e < d.n_expert; ++e) {
        double ctx = 0;
        for (uint32_t j = 0; j < k; ++j) ctx += U[static_cast<size_t>(e) * k + j] * c[j];
        logits[e] = static_cast<float>(gain[e] * (st * rng.normal() + sc * ctx));
      }
      select_experts(d, logits, bias, cur);
      record(t, cur, tok ? &prev : nullptr, d.n_expert_used, mark);
      prev.swap(cur);
      for (double& v : c) v = hp.rho * v + innov * rng.normal();
    }
  }
  return finish(d, t, hp.seed);
}

double calibrate_ctx_share(RouterDesign d, const HiddenProcess& h, double target_ratio) {
  // The weights can carry at most ctx_std^2 / (1 + ctx_std^2) of the variance in the context.
  const double hi_limit = d.ctx_std * d.ctx_std / (1.0 + d.ctx_std * d.ctx_std);
  double lo = 0.0, hi = hi_limit;
  d.ctx_share = hi;
  if (estimate_routing_fast(d, h).reuse_ratio() < target_ratio) return hi;  // as close as it gets
  for (int it = 0; it < 9; ++it) {
    d.ctx_share = 0.5 * (lo + hi);
    (estimate_routing_fast(d, h).reuse_ratio() < target_ratio ? lo : hi) = d.ctx_share;
  }
  return hi;
}

}  // namespace sluice::core::synth
