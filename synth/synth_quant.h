// Quantization mixes and random quantized blocks for the synthetic model generator.
//
// Mixes: `--quant Q4_K_M` names a llama.cpp file type (llama_ftype). Which ggml type each tensor
// gets follows the rules of llama-quantize (llama.cpp src/llama-quant.cpp, llama_tensor_get_type,
// as checked against the reference models in shared/reference/tiny):
//   - only tensors named *weight with >= 2 dims are quantized; norms (*_norm.weight), routers
//     (ffn_gate_inp.weight), convolutions (ssm_conv1d*) and biases (exp_probs_b.bias) stay F32;
//   - output.weight: Q6_K (Q8_0 when ne[0] is not a multiple of the block, or for MXFP4_MOE);
//   - attn_v.weight (i = its index among the attn_v tensors, n = their count): Q2_K -> Q4_K if n_head/n_head_kv >= 4 else Q3_K; Q3_K_M -> Q5_K for the first
//     two, Q4_K after; Q3_K_L -> Q5_K; Q4_K_M/Q5_K_M -> Q6_K on use_more_bits layers;
//     Q4_K_S -> Q5_K for the first four; any of them -> Q8_0 when the model has exactly 8 experts;
//   - attn_k.weight: Q8_0 when the model has exactly 8 experts;
//   - ffn_down* (dense, _exps, _shexp; layer from the name, n_layer = block count): Q2_K -> Q3_K;
//     Q3_K_M -> Q5_K below n/16 else Q4_K; Q3_K_L -> Q5_K; Q4_K_M/Q5_K_M -> Q6_K on use_more_bits;
//     Q4_K_S -> Q5_K below n/8;
//   - attn_output.weight: with exactly 8 experts Q2_K/Q3_K_S/Q3_K_M/Q4_K_S/Q4_K_M -> Q5_K; else
//     Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K;
//   - MXFP4_MOE: 3-d (expert) tensors MXFP4, everything else Q8_0;
//   - fallback when ne[0] is not a multiple of the chosen block (attn_k_b, 128-long rows):
//     Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 if still not divisible.
//   use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
// The i-quant and ternary file types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ4_XS, IQ4_NL, TQ1_0, TQ2_0), as llama-quantize makes them WITH an importance matrix (it
// refuses the 1- and 2-bit ones without), checked against the reference files'
// tensor_type_by_name (shared/reference/tiny/deepseek2-{iq1_s,...}.json, less their forced
// --tensor-type overrides):
//   - output.weight: Q5_K for IQ1_S/IQ1_M/IQ2_XXS/IQ2_XS/IQ2_S/IQ3_XXS, else Q6_K;
//   - token_embd.weight: Q2_K for IQ1_S/IQ1_M/IQ2_XXS/IQ2_XS, IQ3_S for IQ2_S/IQ3_XXS, Q4_K for
//     TQ1_0/TQ2_0, else the base type;
//   - IQ1_S/IQ1_M/IQ2_XXS/IQ2_XS/IQ2_S: attn_v Q4_K when n_gqa >= 4 or n_expert >= 4, else Q2_K
//     (IQ3_S for IQ2_S); attn_k Q4_K with exactly 8 experts; the first n_ffn_down/8 ffn_down*
//     tensors (file order) Q2_K (IQ3_S for IQ2_S); attn_output Q5_K with exactly 8 experts, else
//     IQ2_XXS for IQ1_S/IQ1_M and IQ3_S for IQ2_S;
//   - IQ3_XXS: attn_v Q4_K when n_gqa >= 4; attn_output IQ3_S (Q5_K with 8 experts); IQ3_S,
//     IQ4_XS, IQ4_NL: attn_output Q5_K with 8 experts; attn_v Q4_K (IQ3_S) / Q5_K (IQ4_*) when
//     n_gqa >= 4; any attn_v Q8_0 with exactly 8 experts;
//   - fallback when ne[0] is not a multiple of the block: the i-quants -> IQ4_NL, TQ1_0/TQ2_0 -> Q4_0.
//
// Blocks of the i-quants and ternary types: sluice has no weight quantizer for them (ggml's
// searches a codebook with an importance matrix), so their blocks are random valid codes
// (kernels::fill_random_blocks) with the super-scale set for the requested std
// (synth/synth_iquant.cpp). Blocks of the other types: random quantized blocks are produced directly in each type's byte layout (ggml's
// block_q4_K etc.): random quants, sub-block scales drawn in a sane range and mins chosen so each
// sub-block is near zero mean, and the f16 super-scale set so that the dequantized values have the
// requested standard deviation. Every value is finite; no f32 data is ever materialized.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/ggml_type.h"
#include "synth/synth_rng.h"

namespace sluice::core::synth {

struct FileType {
  std::string_view name;   // as llama-quantize spells it: "Q4_K_M"
  uint32_t llama_ftype;    // general.file_type
  GgmlType base;           // the type most weights get
};

// Throws Error(invalid_argument) naming the text and the accepted names.
const FileType& parse_file_type(std::string_view name);
std::string file_type_names();  // "F32, F16, BF16, Q8_0, ..."

// What the type rules need to know about the model.
struct QuantModelInfo {
  uint32_t n_layer = 0;
  uint32_t n_attention_wv = 0;  // attn_v tensors in the model (0: one per layer)
  uint32_t n_head = 1, n_head_kv = 1;
  uint32_t n_expert = 0;
  uint32_t n_ffn_down = 0;      // ffn_down* tensors in the model (the i-quant rules count them)
};

// The ggml type llama-quantize would give tensor `name` (ggml dims `ne`, n_dims of them).
// i_attention_wv: for an attn_v tensor, how many attn_v tensors precede it (-1: its layer);
// i_ffn_down: for an ffn_down* tensor, how many ffn_down* tensors precede it (-1: its layer).
GgmlType choose_tensor_type(const FileType& ft, const QuantModelInfo& model, std::string_view name,
                            const int64_t* ne, uint32_t n_dims, int i_attention_wv = -1, int i_ffn_down = -1);

// Fills dst (a whole number of blocks of `type`) with random blocks whose values have standard
// deviation ~`std` and mean ~0. Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
// MXFP4 and the random-block types below; throws Error(unsupported) for other types.
void fill_random(GgmlType type, Rng& rng, float std, std::span<std::byte> dst);

// The i-quants, IQ4_NL and the ternary types: random valid blocks scaled to std ~`std`.
bool is_random_block_type(GgmlType type);
void fill_random_blocks_scaled(GgmlType type, Rng& rng, float std, std::span<std::byte> dst);

// True when fill_random can produce `type`.
bool can_generate(GgmlType type);

}  // namespace sluice::core::synth
