// KimiK3Model: a `kimi-k3` GGUF's configuration and weights, loaded into RAM.
//
// Weights are read with plain reads (io::Reader::read_sync) into one arena (common/weight_arena.h:
// large tensors are placed so that the O_DIRECT reads land in place), one slot per tensor, in the
// tensor's own ggml type and row layout, except:
//   - 1-D tensors (norms, biases, ssm_a, score vectors) and the conv taps are always F32 in memory
//     (widened when stored otherwise), so ops read them as floats;
//   - with `widen_f16_to_f32`, every F16 tensor becomes F32 (exact): the F16 reference file then
//     is its F32 master;
//   - with `load_routed_experts = false`, `ffn_{gate,up,down}_exps` are not read: their type,
//     shape and file offset are kept so an out-of-core ExpertSource can stream them;
//   - with `stream_layer_tensors = true`, every per-block tensor used as stored (no conversion at
//     load: attention KDA/MLA, norms stored as F32, router, shared experts, dense FFN) and the
//     output head are not read either: a LayerSource streams them block by block
//     (core/layers/streamed_layers.h). What still loads: token embeddings, output_norm,
//     output_res_score and tensors converted at load (1-D tensors and conv taps not stored as
//     F32, a router not stored as F32). streamed() lists the tensors left out.
// Tensors left out keep their type, shape and row size (data == nullptr), so scratch can be sized;
// a converted tensor has its in-memory type (F32) already. KimiK3Model::plan() does all of this
// without allocating or reading: the sizes a budget decides on.
// Every tensor's name, shape and type is checked (check_kimi_k3_tensors) before anything is read.
//
// Tensors are core::Tensor views (core/gguf/tensor.h), as for the other architectures. Routed experts
// are never read by the forward pass from here directly: it asks an ExpertSource
// (core/experts/expert_source.h); KimiK3InCoreExperts is the source over this model's arena.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/weight_arena.h"
#include "core/experts/expert_source.h"
#include "core/gguf/checked_read.h"
#include "core/gguf/gguf.h"
#include "core/kimi_k3/kimi_k3_config.h"
#include "core/gguf/tensor.h"
#include "core/layers/embedding_rows.h"
#include "core/layers/layer_source.h"
#include "io/reader.h"
#include "kernels/matvec.h"

namespace sluice::core {

struct KimiK3Layer {
  Tensor attn_norm, ffn_norm, attn_res_score, ffn_res_score;
  // KDA
  Tensor conv_q, conv_k, conv_v;        // [d_conv, 1, d_inner] F32
  Tensor wq, wk, wv;                    // [n_embd, d_inner]
  Tensor f_a, f_b, w_beta, ssm_a, dt_bias, w_g, ssm_norm;
  Tensor wo;                            // KDA and MLA attn_output
  // MLA
  Tensor wq_a, q_a_norm, wq_b, wkv_a_mqa, kv_a_norm, wk_b, wv_b, w_gate;
  // dense FFN
  Tensor ffn_gate, ffn_up, ffn_down;
  // latent MoE
  Tensor gate_inp, exp_probs_b, gate_exps, up_exps, down_exps;
  Tensor routed_down, routed_up, routed_norm;
  Tensor gate_shexp, up_shexp, down_shexp;
};

struct KimiK3LoadOptions {
  bool widen_f16_to_f32 = false;
  bool load_routed_experts = true;
  bool stream_layer_tensors = false;
  // Sees each loaded tensor's file bytes as read, before any conversion (core/gguf/checked_read.h).
  TensorCheck check_tensor = nullptr;
  std::shared_ptr<const io::FileMapping> mapping = nullptr;  // see ArchLoadOptions::mapping
  bool embeddings_from_file = false;                          // see ArchLoadOptions::embeddings_from_file
};

class KimiK3Model {
 public:
  // Opens `path` with a PreadReader.
  static std::unique_ptr<KimiK3Model> load(const std::string& path, const KimiK3LoadOptions& options = {});
  static std::unique_ptr<KimiK3Model> load(io::Reader& reader, const KimiK3LoadOptions& options = {});
  // Parses and checks the file and plans the load without reading a weight: weight_bytes(),
  // shapes, types and streamed() are those of load(); no tensor has data.
  static std::unique_ptr<KimiK3Model> plan(io::Reader& reader, const KimiK3LoadOptions& options = {});

  const KimiK3Config& config() const { return config_; }
  const GgufFile& gguf() const { return *gguf_; }
  const Tensor& token_embd() const { return token_embd_; }  // no data when embeddings().in_file()
  const EmbeddingRows& embeddings() const { return embeddings_; }
  const Tensor& output_norm() const { return output_norm_; }
  const Tensor& output() const { return output_; }
  const Tensor& output_res_score() const { return output_res_score_; }
  const KimiK3Layer& layer(int64_t il) const { return layers_[static_cast<size_t>(il)]; }
  std::span<const KimiK3Layer> layers() const { return layers_; }
  const std::vector<StreamedTensorOf<KimiK3Layer>>& streamed() const { return streamed_; }
  uint64_t weight_bytes() const { return arena_bytes_ + mapped_bytes_; }  // mapped tensors included
  bool has_routed_experts() const { return has_routed_experts_; }

 private:
  KimiK3Config config_;
  std::unique_ptr<GgufFile> gguf_;
  WeightArena arena_;
  uint64_t arena_bytes_ = 0;
  std::shared_ptr<const io::FileMapping> mapping_;  // holds the views of mapped tensors
  uint64_t mapped_bytes_ = 0;
  Tensor token_embd_, output_norm_, output_, output_res_score_;
  EmbeddingRows embeddings_;
  std::vector<KimiK3Layer> layers_;
  bool has_routed_experts_ = true;
  std::vector<StreamedTensorOf<KimiK3Layer>> streamed_;

  friend class KimiK3Loader;
};

// The in-core ExpertSource: views into a KimiK3Model loaded with its routed experts. Expert e of
// layer il is the e-th [n_lat, n_ff_exp] slice of gate/up and [n_ff_exp, n_lat] slice of down.
class KimiK3InCoreExperts final : public ExpertSource {
 public:
  explicit KimiK3InCoreExperts(const KimiK3Model& model);  // Error(invalid_argument) without experts
  ExpertWeights acquire(int layer, int expert) override;
  void release(int, int) override {}

 private:
  const KimiK3Model& model_;
};

}  // namespace sluice::core
