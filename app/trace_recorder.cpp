#include "app/trace_recorder.h"

#include <filesystem>

#include "common/error.h"

namespace sluice::core {

namespace {
// Header values have no spaces (shared/traces/README.md): a space is written %20.
std::string no_spaces(const std::string& s) {
  std::string out;
  for (char c : s) out += c == ' ' ? std::string("%20") : std::string(1, c);
  return out;
}
}  // namespace

TraceRecorder::TraceRecorder(std::string model_path) : model_path_(std::move(model_path)) {}

void TraceRecorder::begin_sequence(const ExpertGeometry& config, int64_t n_ctx) {
  if (config.n_expert <= 0) {
    throw Error(ErrorCode::invalid_argument, "--trace-out: '" + model_path_ + "' has no routed experts to trace");
  }
  std::vector<int> moe_of_block;
  int moe = 0;
  for (int64_t il = 0; il < config.n_layer; ++il) moe_of_block.push_back(config.moe_layer[static_cast<size_t>(il)] ? moe++ : -1);
  const auto L = static_cast<uint32_t>(moe), E = static_cast<uint32_t>(config.n_expert),
             K = static_cast<uint32_t>(config.n_expert_used);
  if (!sequences_.empty() && (L != n_layer_ || E != n_expert_ || K != topk_)) {
    throw Error(ErrorCode::invalid_argument, "--trace-out: all sequences of one trace must come from one model shape");
  }
  n_layer_ = L, n_expert_ = E, topk_ = K;
  moe_of_block_ = std::move(moe_of_block);
  Sequence s;
  s.experts.reserve(static_cast<size_t>(std::max<int64_t>(n_ctx, 1)) * L * K);
  sequences_.push_back(std::move(s));
}

void TraceRecorder::on_routing(const RoutingEvent& event) {
  if (sequences_.empty() || event.layer < 0 || static_cast<size_t>(event.layer) >= moe_of_block_.size()) return;
  const int moe = moe_of_block_[static_cast<size_t>(event.layer)];
  if (moe < 0) return;
  Sequence& s = sequences_.back();
  if (s.first_pos < 0) s.first_pos = event.pos;
  const int64_t t = event.pos - s.first_pos;
  if (t < 0) return;  // before the sequence began: not part of it
  if (t >= s.n_token) {
    s.n_token = t + 1;
    s.experts.resize(static_cast<size_t>(s.n_token) * n_layer_ * topk_, 0);
  }
  uint32_t* row = s.experts.data() + (static_cast<size_t>(t) * n_layer_ + static_cast<size_t>(moe)) * topk_;
  const size_t k = std::min<size_t>(topk_, event.experts.size());
  for (size_t i = 0; i < k; ++i) row[i] = static_cast<uint32_t>(event.experts[i]);
  ++s.events;
}

cache::Trace TraceRecorder::trace() const {
  cache::Trace tr;
  cache::TraceHeader& h = tr.header;
  h.model = no_spaces(std::filesystem::path(model_path_).stem().string());
  h.n_layer = n_layer_;
  h.n_expert = n_expert_;
  h.topk = topk_;
  h.fields = {{"model", h.model},
              {"layers", std::to_string(n_layer_)},
              {"experts", std::to_string(n_expert_)},
              {"topk", std::to_string(topk_)},
              {"source", "sluice:" + no_spaces(model_path_)}};
  for (const Sequence& s : sequences_) {
    if (s.n_token == 0) continue;
    if (s.events != static_cast<uint64_t>(s.n_token) * n_layer_) {
      throw Error(ErrorCode::internal, "routing trace: sequence " + std::to_string(tr.sequences.size()) + " has " +
                                           std::to_string(s.events) + " routing decisions for " +
                                           std::to_string(s.n_token) + " tokens x " + std::to_string(n_layer_) +
                                           " MoE layers");
    }
    cache::TraceSequence out;
    out.n_token = static_cast<uint32_t>(s.n_token);
    out.experts.assign(s.experts.begin(), s.experts.begin() + static_cast<std::ptrdiff_t>(s.n_token * n_layer_ * topk_));
    tr.sequences.push_back(std::move(out));
  }
  return tr;
}

}  // namespace sluice::core
