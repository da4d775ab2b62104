// Helpers for the model suites: run a reference GGUF teacher-forced through a Session and
// compare with llama.cpp's recorded logits, tokens and routing (../shared/reference/tiny).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/experts/expert_source.h"
#include "core/llama/model.h"
#include "core/llama/session.h"
#include "core/llama/in_core_experts.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

namespace sluice::test {

inline std::filesystem::path tiny_dir(const std::string& arch) { return reference_dir() / "tiny" / arch; }

struct Manifest {
  std::vector<int32_t> prompt;
  std::vector<int32_t> gen;
  int64_t n_vocab = 0;
  std::vector<float> logits;  // [n_prompt + n_gen][n_vocab]
  nlohmann::json json;
};

inline Manifest load_manifest(const std::string& arch, const std::string& variant) {
  Manifest m;
  const auto dir = tiny_dir(arch);
  m.json = nlohmann::json::parse(read_text(dir / (arch + "-" + variant + ".json")));
  m.prompt = m.json["prompt_tokens"].get<std::vector<int32_t>>();
  m.gen = m.json["gen_tokens"].get<std::vector<int32_t>>();
  m.n_vocab = m.json["logits_shape"][1].get<int64_t>();
  const auto bytes = read_file(dir / m.json["logits_file"].get<std::string>());
  m.logits.resize(bytes.size() / 4);
  std::memcpy(m.logits.data(), bytes.data(), m.logits.size() * 4);
  return m;
}

struct RoutingKey {
  int64_t pos;
  int layer;
  bool operator<(const RoutingKey& o) const { return std::pair(pos, layer) < std::pair(o.pos, o.layer); }
};
struct RoutingRecord {
  std::vector<int32_t> experts;
  std::vector<float> weights;
  std::vector<int32_t> groups;
};

class RoutingLog final : public core::RoutingObserver {
 public:
  void on_routing(const core::RoutingEvent& e) override {
    RoutingRecord& r = records[{e.pos, e.layer}];
    r.experts.assign(e.experts.begin(), e.experts.end());
    r.weights.assign(e.weights.begin(), e.weights.end());
    r.groups.assign(e.groups.begin(), e.groups.end());
  }
  std::map<RoutingKey, RoutingRecord> records;
};

// A prompt of n token ids spread over [0, n_vocab) by a seeded LCG (default: the tiled-attention
// tests' seed).
inline std::vector<int32_t> long_prompt(int64_t n_vocab, size_t n, uint64_t seed = 0x9e3779b97f4a7c15ull) {
  std::vector<int32_t> t(n);
  uint64_t x = seed;
  for (auto& id : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(n_vocab));
  }
  return t;
}

struct TeacherForced {
  std::vector<float> logits;  // [rows][n_vocab]
  RoutingLog routing;
};

// Prompt as one batch, then each gen token alone. `options` (context, batch, KV type) as the
// reference run's unless given.
inline TeacherForced teacher_force(const core::Model& model, const std::vector<int32_t>& prompt,
                                   const std::vector<int32_t>& gen, GgmlType kv_type, unsigned threads = 1,
                                   core::SessionOptions options = {.n_ctx = 128, .n_batch = 64}) {
  TeacherForced out;
  kernels::ThreadPool pool(threads);
  core::InCoreExpertSource experts(model);
  options.kv_type = kv_type;
  core::LlamaSession session(model, experts, pool, options);
  session.set_routing_observer(&out.routing);
  auto rows = session.forward(prompt, 0);
  out.logits.assign(rows.begin(), rows.end());
  for (size_t s = 0; s < gen.size(); ++s) {
    auto row = session.forward({&gen[s], 1}, static_cast<int64_t>(prompt.size() + s));
    out.logits.insert(out.logits.end(), row.begin(), row.end());
  }
  return out;
}

inline int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  return best;
}

struct Comparison {
  bool bit_identical = false;  // every logit's bits equal the reference's (memcmp)
  double max_diff = 0;
  int tokens_equal = 0;        // greedy choices equal to gen_tokens
  int routing_records = 0;
  int routing_mismatches = 0;  // expert set differs
  int group_mismatches = 0;
  double max_weight_diff = 0;
};

inline Comparison compare(const Manifest& m, const TeacherForced& run) {
  Comparison c;
  RunningMax weight_diff;
  const int64_t V = m.n_vocab;
  const size_t rows = m.prompt.size() + m.gen.size();
  c.max_diff = max_abs_diff(run.logits, m.logits);  // NaN on a NaN logit or a missing row
  c.bit_identical = run.logits.size() == m.logits.size() &&
                    std::memcmp(run.logits.data(), m.logits.data(), m.logits.size() * sizeof(float)) == 0;
  for (size_t s = 0; s < m.gen.size(); ++s) {
    const size_t r = m.prompt.size() - 1 + s;
    if (r < rows && argmax(run.logits.data() + r * V, V) == m.gen[s]) ++c.tokens_equal;
  }
  for (const auto& rec : m.json["routing"]) {
    ++c.routing_records;
    const RoutingKey key{rec["pos"].get<int64_t>(), rec["layer"].get<int>()};
    auto it = run.routing.records.find(key);
    if (it == run.routing.records.end()) {
      ++c.routing_mismatches;
      continue;
    }
    auto want = rec["experts"].get<std::vector<int32_t>>();
    auto have = it->second.experts;
    const auto want_w = rec["weights"].get<std::vector<float>>();
    if (want == have)
      for (size_t i = 0; i < want.size(); ++i) weight_diff.add_abs_diff(want_w[i], it->second.weights[i]);
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want != have) ++c.routing_mismatches;
    if (rec.contains("groups")) {
      auto wg = rec["groups"].get<std::vector<int32_t>>();
      auto hg = it->second.groups;
      std::sort(wg.begin(), wg.end());
      std::sort(hg.begin(), hg.end());
      if (wg != hg) ++c.group_mismatches;
    }
  }
  c.max_weight_diff = weight_diff.value();
  return c;
}

}  // namespace sluice::test
