#include "core/kimi_k3/kimi_k3_architecture.h"

#include <algorithm>

#include "common/error.h"
#include "core/kimi_k3/kimi_k3_session.h"

namespace sluice::core {

namespace {

KimiK3SessionOptions k3_options(const SessionOptions& o) {
  return {.n_ctx = o.n_ctx, .n_batch = o.n_batch, .kv_type = o.kv_type, .n_seq = std::max<int64_t>(o.n_seq, 1),
          .prefetch_depth = o.prefetch_depth, .n_logit_rows = o.n_logit_rows, .exchange = o.exchange, .route = o.route,
          .mla_decompress_cells = o.mla_decompress_cells, .mla_decompress_tokens = o.mla_decompress_tokens};
}

int64_t n_ctx_of(const KimiK3Config& c, int64_t n_ctx) { return n_ctx > 0 ? n_ctx : std::min<int64_t>(c.n_ctx_train, 4096); }

KimiK3LoadOptions to_load_options(const ArchLoadOptions& o) {
  return {.widen_f16_to_f32 = o.widen_f16_to_f32,
          .load_routed_experts = o.load_routed_experts,
          .stream_layer_tensors = o.stream_layer_tensors,
          .check_tensor = o.check_tensor,
          .mapping = o.mapping,
          .embeddings_from_file = o.embeddings_from_file};
}

uint64_t n_seq_of(const SessionOptions& o) { return static_cast<uint64_t>(std::max<int64_t>(o.n_seq, 1)); }

}  // namespace

uint64_t KimiK3ArchModel::kv_bytes(const SessionOptions& o) const {
  const KimiK3Config& c = model_->config();
  return KimiK3State::kv_bytes_for(c, n_ctx_of(c, o.n_ctx), o.kv_type) * n_seq_of(o);
}

uint64_t KimiK3ArchModel::recurrent_bytes(const SessionOptions& o) const {
  return KimiK3State::recurrent_bytes_for(model_->config()) * n_seq_of(o);
}

uint64_t KimiK3ArchModel::scratch_bytes(const SessionOptions& o, unsigned threads) const {
  return KimiK3Session::scratch_bytes_for(*model_, k3_options(o), threads);
}

cache::ShardLayout KimiK3ArchModel::layer_layout() const {
  if (model_->streamed().empty()) return {};
  return build_layer_plan(std::span<const StreamedTensorOf<KimiK3Layer>>(model_->streamed())).layout;
}

LayerStream& KimiK3ArchModel::stream_layers(const ShardIndex* index) {
  if (!layers_)
    layers_ = std::make_unique<StreamedLayers<KimiK3Layer>>(model_->layers(), model_->output(), model_->streamed(), index);
  return layers_->stream();
}

std::unique_ptr<ExpertSource> KimiK3ArchModel::in_core_experts() const {
  return std::make_unique<KimiK3InCoreExperts>(*model_);
}

std::unique_ptr<Session> KimiK3ArchModel::create_session(ExpertSource& experts, kernels::ThreadPool& pool,
                                                         const SessionOptions& options) {
  return std::make_unique<KimiK3Session>(*model_, experts, pool, k3_options(options), layers_.get());
}

std::unique_ptr<ArchModel> KimiK3Architecture::plan(io::Reader& reader, const ArchLoadOptions& options) const {
  return std::make_unique<KimiK3ArchModel>(KimiK3Model::plan(reader, to_load_options(options)));
}

std::unique_ptr<ArchModel> KimiK3Architecture::load(io::Reader& reader, const ArchLoadOptions& options,
                                                    std::unique_ptr<ArchModel>) const {
  return std::make_unique<KimiK3ArchModel>(KimiK3Model::load(reader, to_load_options(options)));
}

}  // namespace sluice::core
