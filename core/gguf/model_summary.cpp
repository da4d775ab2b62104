#include "core/gguf/model_summary.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace sluice::core {

std::string_view to_string(TensorClass c) {
  switch (c) {
    case TensorClass::routed_experts: return "routed experts";
    case TensorClass::shared_experts: return "shared experts";
    case TensorClass::attention: return "attention";
    case TensorClass::dense_ffn: return "dense FFN";
    case TensorClass::moe_latent: return "MoE latent projections";
    case TensorClass::router: return "router";
    case TensorClass::embeddings_output: return "embeddings/output";
    case TensorClass::norms: return "norms";
    case TensorClass::other: return "other";
  }
  return "other";
}

int tensor_layer(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  std::string_view rest = name.substr(4);
  int layer = -1;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
  if (ec != std::errc() || ptr == rest.data() || ptr == rest.data() + rest.size() || *ptr != '.') return -1;
  return layer;
}

namespace {

// "blk.3.ffn_up_exps.weight" -> "ffn_up_exps"
std::string_view base_name(std::string_view name) {
  if (tensor_layer(name) >= 0) name = name.substr(name.find('.', 4) + 1);
  for (std::string_view suffix : {".weight", ".bias"}) {
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      return name.substr(0, name.size() - suffix.size());
    }
  }
  return name;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

}  // namespace

TensorClass classify_tensor(std::string_view name) {
  std::string_view b = base_name(name);
  if (ends_with(b, "_exps")) return TensorClass::routed_experts;
  if (ends_with(b, "_shexp")) return TensorClass::shared_experts;
  if (b == "ffn_gate_inp" || b == "exp_probs_b" || starts_with(b, "ffn_gate_inp")) return TensorClass::router;
  if (contains(b, "norm")) return TensorClass::norms;
  if (b == "token_embd" || b == "output" || b == "token_types" || b == "position_embd") {
    return TensorClass::embeddings_output;
  }
  if (starts_with(b, "ffn_routed_")) return TensorClass::moe_latent;
  if (b == "ffn_gate" || b == "ffn_up" || b == "ffn_down") return TensorClass::dense_ffn;
  if (starts_with(b, "attn_") || starts_with(b, "ssm_")) return TensorClass::attention;
  return TensorClass::other;
}

ModelSummary summarize(const GgufFile& file) {
  ModelSummary s;
  s.architecture = file.architecture();
  s.file_bytes = file.file_size();
  s.data_offset = file.data_offset();
  s.tensor_count = file.tensors().size();

  std::vector<LayerShard> layers;
  for (const GgufTensorInfo& t : file.tensors()) {
    TensorClass c = classify_tensor(t.name);
    s.class_bytes[static_cast<size_t>(c)] += t.n_bytes;
    if (c != TensorClass::routed_experts) continue;
    int layer = tensor_layer(t.name);
    uint32_t n_expert = static_cast<uint32_t>(t.n_dims >= 3 ? t.ne[2] : 1);
    auto it = std::find_if(layers.begin(), layers.end(), [&](const LayerShard& l) { return l.layer == layer; });
    if (it == layers.end()) {
      layers.push_back(LayerShard{layer, n_expert, 0});
      it = layers.end() - 1;
    }
    it->n_expert = std::max(it->n_expert, n_expert);
    it->shard_bytes += t.n_bytes / n_expert;
  }
  std::sort(layers.begin(), layers.end(), [](const LayerShard& a, const LayerShard& b) { return a.layer < b.layer; });
  s.moe_layers = std::move(layers);

  s.routed_expert_bytes = s.class_bytes[static_cast<size_t>(TensorClass::routed_experts)];
  for (uint64_t b : s.class_bytes) s.resident_bytes += b;
  s.resident_bytes -= s.routed_expert_bytes;

  const std::string prefix = s.architecture + ".";
  s.n_expert = static_cast<uint32_t>(file.get_uint_or(prefix + "expert_count", 0));
  s.n_expert_used = static_cast<uint32_t>(file.get_uint_or(prefix + "expert_used_count", 0));
  uint64_t per_token_layers = 0;
  for (const LayerShard& l : s.moe_layers) {
    s.expert_shard_bytes = std::max(s.expert_shard_bytes, l.shard_bytes);
    per_token_layers += l.shard_bytes;
    if (s.n_expert == 0) s.n_expert = l.n_expert;
  }
  s.routed_bytes_per_token = per_token_layers * s.n_expert_used;
  return s;
}

double decode_ceiling_tok_s(const ModelSummary& s, double disk_gbps, double hit_rate) {
  double bytes = (1.0 - hit_rate) * static_cast<double>(s.routed_bytes_per_token);
  if (bytes <= 0) return std::numeric_limits<double>::infinity();
  return disk_gbps * 1e9 / bytes;
}

}  // namespace sluice::core
