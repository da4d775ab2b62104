// The llama family (llama/Mixtral, qwen3moe, deepseek2) behind the Architecture seam
// (core/arch/architecture.h): Model + LlamaSession, layer streaming through StreamedLayers (core/layers),
// router-guided prefetch through the ExpertPredictor.
#pragma once

#include <memory>

#include "core/arch/architecture.h"
#include "core/llama/model.h"
#include "core/layers/streamed_layers.h"

namespace sluice::core {

class LlamaArchModel final : public ArchModel {
 public:
  explicit LlamaArchModel(Model model);
  ~LlamaArchModel() override;
  const Model& model() const { return model_; }

  const GgufFile& gguf() const override { return model_.gguf(); }
  std::string describe() const override { return model_.config().describe(); }
  int64_t n_vocab() const override { return model_.config().n_vocab; }
  uint64_t weight_bytes() const override { return model_.weight_bytes(); }
  ExpertGeometry expert_geometry() const override { return ExpertGeometry::of(model_.config()); }
  uint64_t kv_bytes(const SessionOptions& options) const override;
  uint64_t recurrent_bytes(const SessionOptions&) const override { return 0; }
  uint64_t scratch_bytes(const SessionOptions& options, unsigned threads) const override;
  bool predicts_experts() const override { return true; }
  bool embeddings_in_file() const override { return model_.embeddings().in_file(); }
  cache::ShardLayout layer_layout() const override;
  LayerStream& stream_layers(const ShardIndex* index) override;
  std::unique_ptr<ExpertSource> in_core_experts() const override;
  std::unique_ptr<Session> create_session(ExpertSource& experts, kernels::ThreadPool& pool,
                                          const SessionOptions& options) override;

 private:
  Model model_;
  std::unique_ptr<StreamedLayers<LayerWeights>> layers_;  // null: every block resident
};

class LlamaArchitecture final : public Architecture {
 public:
  std::string_view name() const override { return "llama-family"; }
  std::unique_ptr<ArchModel> plan(io::Reader& reader, const ArchLoadOptions& options) const override;
  std::unique_ptr<ArchModel> load(io::Reader& reader, const ArchLoadOptions& options,
                                  std::unique_ptr<ArchModel> planned) const override;
  bool can_stream_layers() const override { return true; }
};

}  // namespace sluice::core
