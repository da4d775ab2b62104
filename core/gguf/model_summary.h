// What a GGUF model is made of, in the terms sluice streams it by.
//
// Every tensor falls in one class. Routed experts (`blk.N.ffn_{gate,up,down}_exps`) are the
// only tensors that are streamed as shards; everything else is "resident" (kept in RAM when the
// budget allows). A shard is one expert of one layer: its slice of each routed expert tensor,
// i.e. tensor bytes / n_expert for each of gate, up and down.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf/gguf.h"

namespace sluice::core {

enum class TensorClass {
  routed_experts,
  shared_experts,
  attention,
  dense_ffn,
  moe_latent,  // Kimi K3's latent down/up projections around the routed experts
  router,
  embeddings_output,
  norms,
  other,
};
constexpr size_t kTensorClassCount = 9;
std::string_view to_string(TensorClass c);
TensorClass classify_tensor(std::string_view name);
// Block index from "blk.N.xxx", or -1.
int tensor_layer(std::string_view name);

struct LayerShard {
  int layer = 0;               // transformer block index
  uint32_t n_expert = 0;
  uint64_t shard_bytes = 0;    // gate + up + down slices of one expert
};

struct ModelSummary {
  std::string architecture;
  uint64_t file_bytes = 0;
  uint64_t data_offset = 0;
  uint64_t tensor_count = 0;
  std::array<uint64_t, kTensorClassCount> class_bytes{};
  uint64_t routed_expert_bytes = 0;
  uint64_t resident_bytes = 0;  // everything that is not a routed expert
  std::vector<LayerShard> moe_layers;
  uint64_t expert_shard_bytes = 0;      // largest shard
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;
  uint64_t routed_bytes_per_token = 0;  // n_expert_used x sum over MoE layers of shard bytes
};

ModelSummary summarize(const GgufFile& file);

// tok/s = disk_GBps / ((1 - hit_rate) x routed_bytes_per_token); GB = 1e9 bytes.
double decode_ceiling_tok_s(const ModelSummary& s, double disk_gbps, double hit_rate);

}  // namespace sluice::core
