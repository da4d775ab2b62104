#include "core/experts/cache_aware_routing.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "kernels/topk.h"

namespace sluice::core {

RoutePolicy parse_route_policy(const std::string& text) {
  const std::string usage = "--route '" + text + "': expected exact, cache-aware, cache-aware=J or cache-aware=J,M";
  if (text == "exact") return {};
  const std::string prefix = "cache-aware";
  if (text.rfind(prefix, 0) != 0) throw Error(ErrorCode::invalid_argument, usage);
  RoutePolicy p;
  p.cache_aware = true;
  if (text.size() == prefix.size()) return p;
  if (text[prefix.size()] != '=') throw Error(ErrorCode::invalid_argument, usage);
  const std::string rest = text.substr(prefix.size() + 1);
  const size_t comma = rest.find(',');
  auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos || std::stoi(s) == 0)
      throw Error(ErrorCode::invalid_argument, "--route '" + text + "': J and M must be positive whole numbers");
    return std::stoi(s);
  };
  p.keep = number(rest.substr(0, comma));
  if (comma != std::string::npos) p.window = number(rest.substr(comma + 1));
  return p;
}

void check_route_policy(const RoutePolicy& p, int64_t n_expert_used) {
  if (p.exact() || n_expert_used <= 0) return;
  const int64_t k = n_expert_used;
  if (p.keep_for(k) > k)
    throw Error(ErrorCode::invalid_argument, "--route cache-aware=" + std::to_string(p.keep) + ": J must be 1 to " +
                                                 std::to_string(k) + " (the experts each token of this model uses)");
  if (p.window_for(k) < k)
    throw Error(ErrorCode::invalid_argument, "--route cache-aware=" + std::to_string(p.keep) + "," + std::to_string(p.window) +
                                                 ": M must be at least " + std::to_string(k) +
                                                 " (the experts each token of this model uses)");
}

std::string describe(const RoutePolicy& p, int64_t n_expert_used) {
  if (p.exact()) return "exact";
  return "cache-aware (the top " + std::to_string(p.keep_for(n_expert_used)) + " kept, the rest from cached experts in the top " +
         std::to_string(p.window_for(n_expert_used)) + ")";
}

void select_experts(std::span<const float> sel, std::span<int32_t> ids, const RoutePolicy& policy,
                    std::span<const uint8_t> cached, std::span<int32_t> ranks) {
  const size_t k = ids.size();
  const auto keep = static_cast<size_t>(policy.keep_for(static_cast<int64_t>(k)));
  if (policy.exact() || keep >= k || cached.empty()) return kernels::top_k(sel, ids);
  const size_t m = std::min(sel.size(), std::max(k, static_cast<size_t>(policy.window_for(static_cast<int64_t>(k)))));
  const std::span<int32_t> top = ranks.subspan(0, m);
  kernels::top_k(sel, top);
  size_t n = 0;
  for (; n < keep; ++n) ids[n] = top[n];
  // Cached experts from the ranks after J, best first.
  // (Not from outside the chosen groups of group-limited routing: their scores are -inf.)
  for (size_t r = keep; r < m && n < k; ++r)
    if (cached[static_cast<size_t>(top[r])] && sel[static_cast<size_t>(top[r])] > -std::numeric_limits<float>::infinity())
      ids[n++] = top[r];
  // Too few cached: the true next ranks not taken yet.
  for (size_t r = keep; r < m && n < k; ++r)
    if (std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), top[r]) == ids.begin() + static_cast<std::ptrdiff_t>(n))
      ids[n++] = top[r];
  // Best first, as exact routing orders them (selection order is the order the slots are summed).
  std::sort(ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.begin() + static_cast<std::ptrdiff_t>(k),
            [&](int32_t a, int32_t b) { return std::find(top.begin(), top.end(), a) < std::find(top.begin(), top.end(), b); });
}

}  // namespace sluice::core
