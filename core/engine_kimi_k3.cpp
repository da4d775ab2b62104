// Engine for kimi-k3 models: the same expert cache as every other architecture, over
// KimiK3Session (core/engine.h says what differs).
#include "cache/arena.h"
#include "common/error.h"
#include "common/units.h"
#include "core/engine.h"

namespace sluice::core {

void Engine::open_kimi_k3(bool stream) {
  const EngineOptions& options = options_;
  k3_model_ = KimiK3Model::load(*reader_, {.widen_f16_to_f32 = options.widen_f16_to_f32, .load_routed_experts = !stream});
  const KimiK3Config& config = k3_model_->config();
  const ExpertGeometry geometry = ExpertGeometry::of(config);
  std::optional<ShardIndex> index;
  if (stream) {
    if (options.verify) index = ShardIndex::load(options.model_path, k3_model_->gguf(), *reader_);
    verifying_ = index.has_value();
    auto source = std::make_unique<CachedExpertSource>(
        k3_model_->gguf(), geometry, build_shard_layout(k3_model_->gguf(), geometry, index ? &*index : nullptr));
    streamed_ = source.get();
    experts_ = std::move(source);
  } else {
    experts_ = std::make_unique<KimiK3InCoreExperts>(*k3_model_);
  }
  k3_session_ = std::make_unique<KimiK3Session>(
      *k3_model_, *experts_, *pool_,
      KimiK3SessionOptions{.n_ctx = options.session.n_ctx, .n_batch = options.session.n_batch, .kv_type = options.session.kv_type});
  split_.resident_weights = k3_model_->weight_bytes();
  split_.kv_cache = k3_session_->kv_cache_bytes();
  split_.recurrent_state = k3_session_->recurrent_state_bytes();
  split_.scratch = k3_session_->scratch_bytes();
  split_.budget = options.budget_bytes;
  split_.n_batch = k3_session_->n_batch();
  if (!stream) {
    split_.min_budget = split_.total();
    if (options.budget_bytes > 0 && split_.total() > options.budget_bytes) {
      throw Error(ErrorCode::budget, "budget " + human_bytes(options.budget_bytes) + " is below the " +
                                         human_bytes(split_.total()) + " an in-core run of '" + options.model_path +
                                         "' needs (all weights + KV cache + recurrent state + scratch)");
    }
    return;
  }
  const cache::ShardLayout& layout = streamed_->layout().layout;
  const uint32_t alignment = cache::usable_alignment(reader_->alignment());
  const uint64_t all_experts_arena = cache::plan_cache(layout, UINT64_MAX / 4, alignment).arena_bytes;
  split_.expert_min = cache::plan_cache(layout, all_experts_arena, alignment).min_bytes;
  split_.min_budget = split_.total() + split_.expert_min;
  const uint64_t min = split_.min_budget;
  Error too_small(ErrorCode::budget,
                  "budget " + human_bytes(options.budget_bytes) + " is below the minimum " +
                      std::to_string((min + (1ull << 20) - 1) >> 20) + " MiB (" + std::to_string(min) + " bytes) for '" +
                      options.model_path + "' (resident weights " + human_bytes(split_.resident_weights) +
                      " + MLA cache " + human_bytes(split_.kv_cache) + " + recurrent state " +
                      human_bytes(split_.recurrent_state) + " + scratch at batch " + std::to_string(split_.n_batch) +
                      " " + human_bytes(split_.scratch) + " + one MoE layer's experts " +
                      human_bytes(split_.expert_min) + ")");
  attach_expert_cache(all_experts_arena, too_small);
}

}  // namespace sluice::core
