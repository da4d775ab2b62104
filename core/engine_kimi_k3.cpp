// Engine for kimi-k3 models: the same expert cache as every other architecture, over
// KimiK3Session (core/engine.h says what differs).
#include <algorithm>

#include "cache/arena.h"
#include "common/error.h"
#include "common/units.h"
#include "core/engine.h"
#include "core/gguf/model_summary.h"

namespace sluice::core {

void Engine::open_kimi_k3(bool stream) {
  const EngineOptions& options = options_;
  if (options.gpu) throw Error(ErrorCode::unsupported, "--gpu is not supported for kimi-k3 models yet; run them without --gpu");
  k3_model_ = KimiK3Model::load(*plain_reader_, {.widen_f16_to_f32 = options.widen_f16_to_f32, .load_routed_experts = !stream});
  const KimiK3Config& config = k3_model_->config();
  split_.routed_expert_bytes = summarize(k3_model_->gguf()).routed_expert_bytes;
  const ExpertGeometry geometry = ExpertGeometry::of(config);
  std::optional<ShardIndex> index = index_for_run(verify_mode(), options.model_path, k3_model_->gguf(), *plain_reader_, notices_);
  if (index && !stream) {
    notices_.push_back("kimi-k3 in core: weights are not checked against the shard index (only streamed experts are)");
  }
  if (stream) {
    verifying_ = index.has_value();
    auto source = std::make_unique<CachedExpertSource>(
        k3_model_->gguf(), geometry, build_shard_layout(k3_model_->gguf(), geometry, index ? &*index : nullptr));
    streamed_ = source.get();
    experts_ = std::move(source);
  } else {
    experts_ = std::make_unique<KimiK3InCoreExperts>(*k3_model_);
  }
  KimiK3SessionOptions so{.n_ctx = options.session.n_ctx, .n_batch = options.session.n_batch,
                          .kv_type = options.session.kv_type};
  const int64_t n_ctx = so.n_ctx > 0 ? so.n_ctx : std::min<int64_t>(config.n_ctx_train, 4096);
  auto scratch_at = [&](int64_t batch) {
    KimiK3SessionOptions o = so;
    o.n_batch = batch;
    return KimiK3Session::scratch_bytes_for(*k3_model_, o, options.threads);
  };
  // What the budget must hold besides the scratch, known before the session allocates anything.
  uint64_t all_experts_arena = 0;
  uint64_t fixed = k3_model_->weight_bytes() + KimiK3State::recurrent_bytes_for(config) +
                   KimiK3State::kv_bytes_for(config, n_ctx, so.kv_type);
  if (stream) {
    const cache::ShardLayout& layout = streamed_->layout().layout;
    const uint32_t alignment = cache::usable_alignment(reader_->alignment());
    all_experts_arena = cache::plan_cache(layout, UINT64_MAX / 4, alignment).arena_bytes;
    split_.expert_min = cache::plan_cache(layout, all_experts_arena, alignment).min_bytes;
    fixed += split_.expert_min;
  }
  split_.min_budget = fixed + scratch_at(1);
  if (options.budget_bytes > 0 && stream) {
    // A tight budget lowers the prompt batch (the scratch scales with it), as for other models.
    const int64_t requested = so.n_batch;
    while (so.n_batch > 1 && fixed + scratch_at(so.n_batch) > options.budget_bytes) so.n_batch = std::max<int64_t>(1, so.n_batch / 2);
    if (so.n_batch < requested) {
      notices_.push_back("budget: prompt batch lowered from " + std::to_string(requested) + " to " +
                         std::to_string(so.n_batch) + " tokens so the scratch fits (" +
                         human_bytes(scratch_at(so.n_batch)) + " instead of " + human_bytes(scratch_at(requested)) + ")");
    }
  }
  if (options.budget_bytes > 0 && fixed + scratch_at(so.n_batch) > options.budget_bytes) {
    throw Error(ErrorCode::budget,
                "budget " + human_bytes(options.budget_bytes) + " is below the minimum " +
                    std::to_string((split_.min_budget + (1ull << 20) - 1) >> 20) + " MiB (" +
                    std::to_string(split_.min_budget) + " bytes) for '" + options.model_path + "' (resident weights " +
                    human_bytes(k3_model_->weight_bytes()) + " + MLA cache " +
                    human_bytes(KimiK3State::kv_bytes_for(config, n_ctx, so.kv_type)) + " + recurrent state " +
                    human_bytes(KimiK3State::recurrent_bytes_for(config)) + " + scratch at batch 1 " +
                    human_bytes(scratch_at(1)) + (stream ? " + one MoE layer's experts " + human_bytes(split_.expert_min) : "") + ")");
  }
  k3_session_ = std::make_unique<KimiK3Session>(*k3_model_, *experts_, *pool_, so);
  split_.resident_weights = k3_model_->weight_bytes();
  split_.kv_cache = k3_session_->kv_cache_bytes();
  split_.recurrent_state = k3_session_->recurrent_state_bytes();
  split_.scratch = k3_session_->scratch_bytes();
  split_.budget = options.budget_bytes;
  split_.n_batch = k3_session_->n_batch();
  if (!stream) return;
  if (options.session.prefetch_depth > 0) {
    notices_.push_back("prefetch: kimi-k3 experts are not predicted yet (no speculative reads); they still run in completion order");
  }
  attach_expert_cache(all_experts_arena, Error(ErrorCode::internal, "kimi-k3 expert cache planned above the budget"));
}

}  // namespace sluice::core
