// Model: a GGUF model's configuration and its weights, loaded into RAM.
//
// Weights are read with plain reads (io::Reader::read_sync, no mmap) into one 64-byte-aligned
// arena, one slot per tensor, in the tensor's own ggml type and layout:
//   - 1-D tensors (norm weights, biases) are always stored as F32 (widened when the file has
//     them in F16/BF16), so ops can read them as floats;
//   - with `widen_f16_to_f32`, every F16 tensor becomes F32 (exact), which turns the F16 file
//     of the reference set into its F32 master;
//   - a deepseek2 file in the older `attn_kv_b` form is split at load into the `attn_k_b`
//     ([qk_nope, kv_lora, n_head], transposed; F32 when kv_b is quantized) and `attn_v_b`
//     ([kv_lora, v_head, n_head], the kv_b rows as stored) form, so one absorbed-MLA forward pass
//     serves both forms;
//   - with `load_routed_experts = false`, the routed expert tensors (`ffn_*_exps`) are not read:
//     an out-of-core ExpertSource supplies them (see core/experts/expert_source.h);
//   - with `stream_layer_tensors = true`, every per-block tensor that is used as stored (no
//     conversion at load) and the output head (`output.weight`, when not tied to the embeddings)
//     are not read either: a LayerSource streams them layer by layer (core/layers/layer_source.h).
//     What still loads: token embeddings, output_norm, and tensors converted at load (1-D tensors
//     stored as F16/BF16, the attn_kv_b split). streamed() lists the tensors left out;
//   - with `embeddings_from_file` and an output head of its own, token_embd is not read either:
//     a forward reads the rows it needs (core/layers/embedding_rows.h).
// Tensors left out keep their type, shape and row size (data == nullptr), so scratch can be sized.
// Model::plan() does all of this without allocating or reading: the sizes a budget decides on.
//
// Every tensor's name, shape and type is checked against the architecture (core/llama/model_config.h)
// before anything is read.
#pragma once

#include <array>
#include <functional>
#include <span>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/weight_arena.h"
#include "core/gguf/checked_read.h"
#include "core/gguf/gguf.h"
#include "core/gguf/tensor.h"
#include "core/layers/embedding_rows.h"
#include "core/layers/layer_source.h"
#include "core/llama/model_config.h"
#include "io/reader.h"
#include "kernels/matvec.h"

namespace sluice::core {

struct LayerWeights {
  Tensor attn_norm, ffn_norm;
  // GQA (llama, qwen3moe)
  Tensor wq, wk, wv, wo, q_norm, k_norm;
  // MLA (deepseek2); wq is used when there is no q_lora
  Tensor wq_a, q_a_norm, wq_b, wkv_a_mqa, kv_a_norm, wk_b, wv_b;
  // dense FFN
  Tensor ffn_gate, ffn_up, ffn_down;
  // MoE
  Tensor gate_inp;     // [n_embd, n_expert]
  Tensor exp_probs_b;  // [n_expert], selection bias (optional)
  Tensor gate_exps, up_exps, down_exps;  // [n_embd, n_ff_exp, n_expert] / [n_ff_exp, n_embd, n_expert]
  Tensor gate_shexp, up_shexp, down_shexp;
};

struct LoadOptions {
  bool widen_f16_to_f32 = false;
  bool load_routed_experts = true;
  // Optional: sees each tensor's file bytes as read, before any conversion. When it returns
  // false the tensor is read once more; a second false is Error(corrupt_data) naming the tensor
  // and its offset. The engine checks resident tensors against the shard index with it.
  TensorCheck check_tensor = nullptr;
  bool stream_layer_tensors = false;
  std::shared_ptr<const io::FileMapping> mapping = nullptr;  // see ArchLoadOptions::mapping
  bool embeddings_from_file = false;  // see ArchLoadOptions::embeddings_from_file
};

// A non-routed tensor left out of the load for a LayerSource to stream.
using StreamedTensor = StreamedTensorOf<LayerWeights>;

class Model {
 public:
  // Opens `path` with a PreadReader.
  static Model load(const std::string& path, const LoadOptions& options = {});
  static Model load(io::Reader& reader, const LoadOptions& options = {});
  // Parses and checks the file and plans the load without reading any weight: weight_bytes(),
  // shapes and streamed() are those of load(); no tensor has data.
  static Model plan(io::Reader& reader, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *gguf_; }
  const Tensor& token_embd() const { return token_embd_; }  // no data when embeddings().in_file()
  const EmbeddingRows& embeddings() const { return embeddings_; }
  const Tensor& output_norm() const { return output_norm_; }
  const Tensor& output() const { return output_; }  // token_embd when the file ties them
  const LayerWeights& layer(int64_t il) const { return layers_[static_cast<size_t>(il)]; }
  std::span<const LayerWeights> layers() const { return layers_; }
  uint64_t weight_bytes() const { return arena_bytes_ + mapped_bytes_; }  // mapped tensors included
  bool has_routed_experts() const { return has_routed_experts_; }
  const std::vector<StreamedTensor>& streamed() const { return streamed_; }

 private:
  ModelConfig config_;
  std::unique_ptr<GgufFile> gguf_;
  WeightArena arena_;
  uint64_t arena_bytes_ = 0;
  std::shared_ptr<const io::FileMapping> mapping_;  // holds the views of mapped tensors
  uint64_t mapped_bytes_ = 0;
  Tensor token_embd_, output_norm_, output_;
  EmbeddingRows embeddings_;
  std::vector<LayerWeights> layers_;
  bool has_routed_experts_ = true;
  std::vector<StreamedTensor> streamed_;

  friend class ModelLoader;
};

}  // namespace sluice::core
