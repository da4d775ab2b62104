// Session invariants: the same logits for any batching, thread count or expert source.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "common/error.h"

#include "tests/model_files.h"
#include "core/llama/in_core_experts.h"

namespace {

using namespace sluice;
using namespace sluice::test;

std::vector<float> run_chunked(const core::Model& model, const std::vector<int32_t>& tokens, size_t chunk,
                               core::ExpertSource& experts, unsigned threads = 1) {
  kernels::ThreadPool pool(threads);
  core::LlamaSession s(model, experts, pool, {.n_ctx = 128, .n_batch = 64, .kv_type = GgmlType::F32});
  std::vector<float> out;
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const size_t n = std::min(chunk, tokens.size() - i);
    auto rows = s.forward({tokens.data() + i, n}, static_cast<int64_t>(i));
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

std::vector<int32_t> all_tokens(const Manifest& m) {
  std::vector<int32_t> t = m.prompt;
  t.insert(t.end(), m.gen.begin(), m.gen.end());
  return t;
}

// Reads each expert's gate/up/down slices from the file into its own buffers on acquire, as a
// streaming cache would, and checks the plan/acquire/release protocol.
class FileExpertSource final : public core::ExpertSource {
 public:
  FileExpertSource(const std::filesystem::path& path, const core::Model& model)
      : reader_(path.string()), file_(core::GgufFile::parse(reader_)), model_(model) {}

  void plan(int layer, std::span<const int32_t> experts) override {
    planned_[layer].assign(experts.begin(), experts.end());
    for (size_t i = 1; i < experts.size(); ++i) CHECK(experts[i - 1] < experts[i]);
    ++plans;
  }
  core::ExpertWeights acquire(int layer, int expert) override {
    const auto& p = planned_[layer];
    CHECK(std::find(p.begin(), p.end(), expert) != p.end());
    CHECK(pinned_.insert({layer, expert}).second);
    Slot& slot = slots_[{layer, expert}];
    const std::string b = "blk." + std::to_string(layer) + ".";
    const core::LayerWeights& L = model_.layer(layer);
    auto load = [&](const char* name, const core::Tensor& t, std::vector<std::byte>& buf) {
      const core::GgufTensorInfo& info = file_.tensor(b + name);
      const size_t bytes = info.n_bytes / static_cast<size_t>(info.ne[2]);
      buf.resize(bytes);
      reader_.read_sync(info.file_offset + bytes * static_cast<size_t>(expert), buf);
      return kernels::WeightMatrix{t.type, buf.data(), t.ne[0], t.ne[1], t.row_bytes,
                                   kernels::ggml_repacks(t.type, t.ne[1]) ? kernels::GgmlRepack::mul_mat_id
                                                                          : kernels::GgmlRepack::none};
    };
    ++acquires;
    return {load("ffn_gate_exps.weight", L.gate_exps, slot.gate), load("ffn_up_exps.weight", L.up_exps, slot.up),
            load("ffn_down_exps.weight", L.down_exps, slot.down)};
  }
  void release(int layer, int expert) override {
    CHECK(pinned_.erase({layer, expert}) == 1);
    slots_.erase({layer, expert});  // the bytes are gone: a stale view would show
  }
  bool all_released() const { return pinned_.empty(); }
  int plans = 0, acquires = 0;

 private:
  struct Slot {
    std::vector<std::byte> gate, up, down;
  };
  io::PreadReader reader_;
  core::GgufFile file_;
  const core::Model& model_;
  std::map<int, std::vector<int32_t>> planned_;
  std::set<std::pair<int, int>> pinned_;
  std::map<std::pair<int, int>, Slot> slots_;
};

}  // namespace

TEST_CASE("splitting the tokens into forward calls changes logits only by summation order") {
  // Batches of >= 2 tokens take llama.cpp's batched (tinyBLAS) order for F32 products, single
  // tokens its vector order, so one-token calls differ in the last bits; batches agree exactly.
  const core::Model model = core::Model::load((tiny_dir("deepseek2") / "deepseek2-f16.gguf").string(),
                                              {.widen_f16_to_f32 = true});
  core::InCoreExpertSource experts(model);
  const auto tokens = all_tokens(load_manifest("deepseek2", "f32"));
  const auto one = run_chunked(model, tokens, tokens.size(), experts);
  CHECK(run_chunked(model, tokens, 5, experts) == one);
  const double d = max_abs_diff(run_chunked(model, tokens, 1, experts), one);
  MESSAGE("one token per call vs one batch: max |logit diff| " << d);
  CHECK(d <= 1e-4);
}

TEST_CASE("logits do not depend on the thread count") {
  const core::Model model = core::Model::load((tiny_dir("qwen3moe") / "qwen3moe-f16.gguf").string());
  core::InCoreExpertSource experts(model);
  const auto tokens = all_tokens(load_manifest("qwen3moe", "f16"));
  CHECK(run_chunked(model, tokens, 29, experts, 1) == run_chunked(model, tokens, 29, experts, 2));
}

TEST_CASE("experts streamed from the file give bit-identical logits to the in-core model") {
  for (const char* arch : {"deepseek2", "qwen3moe", "llama-moe"}) {
    const auto path = tiny_dir(arch) / (std::string(arch) + "-f16.gguf");
    const core::Model full = core::Model::load(path.string());
    const core::Model lean = core::Model::load(path.string(), {.load_routed_experts = false});
    CHECK(lean.weight_bytes() < full.weight_bytes());
    CHECK_THROWS_AS(core::InCoreExpertSource{lean}, Error);
    core::InCoreExpertSource in_core(full);
    FileExpertSource streamed(path, lean);
    const auto tokens = all_tokens(load_manifest(arch, "f16"));
    const auto a = run_chunked(full, tokens, 29, in_core);
    const auto b = run_chunked(lean, tokens, 29, streamed);
    CHECK(a == b);
    CHECK(streamed.all_released());
    CHECK(streamed.acquires > 0);
    MESSAGE(std::string(arch) << ": " << streamed.plans << " plans, " << streamed.acquires << " expert acquires");
  }
}

TEST_CASE("an F16 KV cache keeps llama.cpp's tokens and routing") {
  for (const char* arch : {"deepseek2", "qwen3moe", "llama-moe"}) {
    const core::Model model = core::Model::load((tiny_dir(arch) / (std::string(arch) + "-f16.gguf")).string());
    const Manifest m = load_manifest(arch, "f16");
    const TeacherForced run = teacher_force(model, m.prompt, m.gen, GgmlType::F16);
    const Comparison c = compare(m, run);
    MESSAGE(std::string(arch) << " with F16 KV: max |logit diff| " << c.max_diff << " vs llama.cpp (F32 KV)");
    CHECK(c.tokens_equal == static_cast<int>(m.gen.size()));
    CHECK(c.routing_mismatches == 0);
    CHECK(c.max_diff < 0.1);
  }
}
