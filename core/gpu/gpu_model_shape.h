// gpu_model_shape: each architecture's model seen as the VRAM tier sees it (core/gpu/vram_plan.h's
// GpuModelShape): its resident weight products in the order the forward pass first multiplies
// with them, the slot one routed expert needs per block, and the widest product.
//
//   llama family  per block: attention (wq_a, wq_b | wq; wk, wv | wkv_a_mqa, wk_b, wv_b; wo),
//                 router, dense FFN or shared experts (up, gate, down); then the output head.
//   kimi-k3       per block: KDA (wq, wk, wv, f_a, f_b, w_beta, w_g, wo) or MLA (wq_a, wq_b | wq,
//                 wkv_a_mqa, wk_b, wv_b, w_gate, wo); dense FFN (gate, up, down) or latent MoE
//                 (router, routed_down, [routed experts], shared gate, up, down, routed_up: the
//                 shared experts overlap the expert exchange, core/experts/expert_exchange.h);
//                 then the output head. Routed experts are [n_lat, n_ff_exp] / [n_ff_exp, n_lat] slices.
//
// Only matrices count: vectors (norms, biases, score vectors) and kimi-k3's conv taps are not
// products. Absent tensors are skipped, and so are tensors not in memory (a planned model's, or
// streamed blocks'): the resident list is what the tier can copy up. max_dim and the expert slots
// come from shapes alone, so a planned model sizes the staging as the loaded one does.
#pragma once

#include "core/gpu/vram_plan.h"
#include "core/kimi_k3/kimi_k3_model.h"
#include "core/llama/model.h"

namespace sluice::core {

GpuModelShape gpu_model_shape(const Model& model);
GpuModelShape gpu_model_shape(const KimiK3Model& model);

}  // namespace sluice::core
