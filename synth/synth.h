// `sluice synth`: synthetic Mixture-of-Experts GGUF files with the real per-layer shapes of
// Kimi K2, DeepSeek-V3, Qwen3-30B-A3B, Qwen3-235B-A22B and Mixtral-8x7B, for benchmarking the
// out-of-core engine without downloading hundreds of GB.
//
// What a generated file is:
//   - the preset's GGUF keys and tensor names exactly as llama.cpp writes them (checked against
//     shared/reference/tiny), with the layer count (and optionally the routed expert count)
//     reduced; every remaining tensor has the real shape, so expert shards and reads weigh what
//     they weigh in the real model;
//   - llama-quantize's type mix for the chosen --quant (synth/synth_quant.h);
//   - random weights with the reference models' init (except the broad-attention query scale
//     below): token_embd N(0,1); output
//     N(0,(8/sqrt(n_embd))^2) (logit std ~8); matrices feeding the residual stream (attn_output,
//     ffn_down, ffn_down_exps, ffn_down_shexp) std 0.15/sqrt(fan_in); other matrices
//     1/sqrt(fan_in); norm weights U(0.8,1.2); router and exp_probs_b from the routing design
//     (synth/synth_routing.h), plus the context rows of attn_output it relies on;
//   - a tokenizer (built-in byte-level BPE, or copied with --vocab) and the preset's chat template;
//   - keys `sluice.synth.*` recording the preset, seed, skew and routing design.
// Quantized blocks are generated directly (no f32 master), so the file is written at disk speed
// through GgufStreamWriter with bounded memory. The same options and seed give the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf/gguf_stream_writer.h"
#include "synth/synth_preset.h"
#include "synth/synth_quant.h"
#include "synth/synth_routing.h"

namespace sluice::core::synth {

struct SynthOptions {
  std::string preset;
  uint32_t layers = 4;
  uint32_t experts = 0;        // 0: the preset's count
  uint32_t expert_ff = 0;      // 0: the preset's expert FF width
  std::string quant = "Q4_K_M";
  std::string vocab_path;      // empty: built-in vocabulary
  double skew = 1.0;
  uint64_t seed = 1;
  std::string out;
  uint64_t split_max_bytes = 0;  // > 0: write gguf-split parts (core/gguf/gguf_split_writer.h) named after `out`
};

// Context rows of attn_output: std = kCtxRowStd * ctx_std / sqrt(fan_in), i.e. the attention
// average over ~16 positions (per-dim std ~1/4) lands in S_l with per-dim std ~ctx_std.
constexpr double kCtxRowStd = 4.0;
// Queries are scaled down (q_norm / q_a_norm weights U(0.8,1.2) * 0.3 for qwen3moe / deepseek2 /
// kimi-k3 MLA, attn_q std * 0.3 for llama) so attention scores are small and attention is broad:
// its output is then an average over the context, which changes slowly from token to token.
// With the reference init (full-size queries) random attention is peaked and the forward pass
// showed no temporal reuse at the first MoE layer; see synth/synth_routing.h for measurements.
constexpr double kQueryScale = 0.3;

struct SynthPlan {
  Preset preset;           // reduced
  const FileType* file_type = nullptr;
  uint32_t n_vocab = 0;
  double ctx_share = 0;    // calibrated routing design (same for every MoE layer)
  HiddenProcess process;
};

// Validates the options and builds the plan (calibrates the routing). Throws
// Error(invalid_argument) naming the flag for bad options.
SynthPlan plan_synth(const SynthOptions& o);

// Declares every key and tensor of the plan on w (tokenizer included).
void declare_model(const SynthPlan& plan, const SynthOptions& o, GgufStreamWriter& w);

// The routing design and router of MoE block `block` (a block index, >= n_layer_dense_lead),
// exactly as the file stores them (ffn_gate_inp, exp_probs_b).
RouterDesign block_router_design(const SynthPlan& plan, double skew, uint32_t block);
RouterWeights block_router(const SynthPlan& plan, const SynthOptions& o, uint32_t block);

struct SynthResult {
  std::vector<std::string> paths;  // the file, or every part of a split model
  uint64_t bytes = 0;              // all of them together
  double seconds = 0;
  SynthPlan plan;
};

// Plans, declares and writes o.out (or its parts). progress gets (done, total) bytes.
SynthResult synthesize(const SynthOptions& o, const GgufStreamWriter::Progress& progress = {});

}  // namespace sluice::core::synth
