#include "core/llama/llama_architecture.h"

#include "core/llama/in_core_experts.h"
#include "core/llama/session.h"

namespace sluice::core {

namespace {

LoadOptions to_load_options(const ArchLoadOptions& o) {
  LoadOptions l;
  l.widen_f16_to_f32 = o.widen_f16_to_f32;
  l.load_routed_experts = o.load_routed_experts;
  l.stream_layer_tensors = o.stream_layer_tensors;
  l.check_tensor = o.check_tensor;
  l.mapping = o.mapping;
  l.embeddings_from_file = o.embeddings_from_file;
  return l;
}

}  // namespace

uint64_t LlamaArchModel::kv_bytes(const SessionOptions& options) const {
  return LlamaSession::kv_bytes_for(model_.config(), options);
}

uint64_t LlamaArchModel::scratch_bytes(const SessionOptions& options, unsigned threads) const {
  return LlamaSession::scratch_bytes_for(model_, options, threads);
}

cache::ShardLayout LlamaArchModel::layer_layout() const {
  if (model_.streamed().empty()) return {};
  return build_layer_plan(std::span<const StreamedTensor>(model_.streamed())).layout;
}

LayerStream& LlamaArchModel::stream_layers(const ShardIndex* index) {
  if (!layers_)
    layers_ = std::make_unique<StreamedLayers<LayerWeights>>(model_.layers(), model_.output(), model_.streamed(), index);
  return layers_->stream();
}

std::unique_ptr<ExpertSource> LlamaArchModel::in_core_experts() const {
  return std::make_unique<InCoreExpertSource>(model_);
}

std::unique_ptr<Session> LlamaArchModel::create_session(ExpertSource& experts, kernels::ThreadPool& pool,
                                                        const SessionOptions& options) {
  return std::make_unique<LlamaSession>(model_, experts, pool, options, layers_.get());
}

LlamaArchModel::LlamaArchModel(Model model) : model_(std::move(model)) {}
LlamaArchModel::~LlamaArchModel() = default;

std::unique_ptr<ArchModel> LlamaArchitecture::plan(io::Reader& reader, const ArchLoadOptions& options) const {
  return std::make_unique<LlamaArchModel>(Model::plan(reader, to_load_options(options)));
}

std::unique_ptr<ArchModel> LlamaArchitecture::load(io::Reader& reader, const ArchLoadOptions& options,
                                                   std::unique_ptr<ArchModel>) const {
  return std::make_unique<LlamaArchModel>(Model::load(reader, to_load_options(options)));
}

}  // namespace sluice::core
