#include "cache/eviction_policy.h"

#include "common/error.h"

namespace sluice::cache {

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> kNames = {"lru",     "lfu",      "lru-quota", "freq",     "hot-pin",
                                                  "predict", "adaptive", "belady",    "lookahead"};
  return kNames;
}

bool policy_needs_profile(std::string_view name) { return name == "hot-pin" || name == "predict"; }
bool policy_requires_profile(std::string_view name) { return name == "hot-pin"; }
bool policy_is_clairvoyant(std::string_view name) { return name == "belady" || name == "lookahead"; }

std::unique_ptr<EvictionPolicy> make_policy(std::string_view name, const PolicyOptions& options) {
  if (name == "lru") return make_lru_policy();
  if (name == "lfu") return make_lfu_policy(options.lfu_half_life_tokens);
  if (name == "lru-quota") return make_lru_quota_policy();
  if (name == "freq") return make_freq_policy(options.freq_lambda);
  if (name == "hot-pin") {
    if (options.profile == nullptr || options.profile->empty()) {
      throw Error(ErrorCode::invalid_argument, "policy 'hot-pin' needs an expert profile (sluice run/bench --warm PROFILE)");
    }
    return make_hot_pin_policy(*options.profile, options.hot_fraction);
  }
  if (name == "predict") return make_predict_policy(options.profile, options.predict_freq_weight, options.predict_horizon,
                               options.predict_profile_tokens, options.predict_next_token);
  if (name == "adaptive") return make_adaptive_policy(options);
  if (name == "belady") {
    if (options.future.empty()) {
      throw Error(ErrorCode::invalid_argument,
                  "policy 'belady' is clairvoyant: it needs the future access sequence "
                  "(simulator only)");
    }
    return make_belady_policy(options.future);
  }
  if (name == "lookahead") {
    if (options.future.empty()) {
      throw Error(ErrorCode::invalid_argument,
                  "policy 'lookahead' is clairvoyant: it needs the future access sequence "
                  "(simulator only)");
    }
    return make_lookahead_policy(options.future, options.lookahead_tokens);
  }
  std::string known;
  for (const auto& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::invalid_argument,
              "unknown eviction policy '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace sluice::cache
