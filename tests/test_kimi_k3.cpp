// Golden tests of the kimi-k3 forward pass against llama.cpp's outputs on the tiny reference model
// (shared/reference/kimi-k3): teacher-forced (prompt as one batch, then each generated token alone),
// every logits row compared with llama.cpp's run of the same file.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/kimi_k3/kimi_k3_model.h"
#include "core/kimi_k3/kimi_k3_session.h"
#include "core/text/tokenizer.h"
#include "common/error.h"
#include "io/pread_reader.h"
#include "kernels/thread_pool.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

fs::path k3_dir() { return test::reference_dir() / "kimi-k3"; }

struct Reference {
  std::string prompt_text;
  std::vector<int32_t> prompt, gen;
  std::vector<float> logits;  // [n_rows][n_vocab]
  nlohmann::json json;
};

Reference load_reference(const std::string& variant) {
  Reference r;
  r.json = nlohmann::json::parse(test::read_text(k3_dir() / ("kimi-k3-" + variant + ".json")));
  r.prompt_text = r.json["prompt_text"].get<std::string>();
  r.prompt = r.json["prompt_tokens"].get<std::vector<int32_t>>();
  r.gen = r.json["gen_tokens"].get<std::vector<int32_t>>();
  const std::vector<uint8_t> raw = test::read_file(k3_dir() / ("kimi-k3-" + variant + ".logits.f32"));
  r.logits.resize(raw.size() / 4);
  std::memcpy(r.logits.data(), raw.data(), r.logits.size() * 4);
  return r;
}

int argmax(const float* x, int64_t n) {
  return static_cast<int>(std::max_element(x, x + n) - x);  // first maximum: ties go to the lowest id
}

// Records every routing decision as (pos, layer) -> experts in selection order.
struct RoutingLog final : core::RoutingObserver {
  std::map<std::pair<int64_t, int>, std::vector<int32_t>> experts;
  void on_routing(const core::RoutingEvent& r) override {
    experts[{r.pos, r.layer}] = std::vector<int32_t>(r.experts.begin(), r.experts.end());
  }
};

// Routing records of llama.cpp's run whose expert list differs from ours (as sets).
int routing_mismatches(const RoutingLog& log, const Reference& ref) {
  int bad = 0;
  for (const auto& rec : ref.json["routing"]) {
    auto want = rec["experts"].get<std::vector<int32_t>>();
    auto it = log.experts.find({rec["pos"].get<int64_t>(), rec["layer"].get<int>()});
    if (it == log.experts.end()) {
      ++bad;
      continue;
    }
    auto got = it->second;
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    bad += got != want;
  }
  return bad;
}

// Teacher-forced run: the prompt (tokenized from the manifest's text, which must give llama.cpp's
// ids) as one batch, then each generated token alone. Returns [n_prompt + n_gen][n_vocab].
std::vector<float> run_teacher_forced(const core::KimiK3Model& model, const Reference& ref, unsigned threads,
                                      core::KimiK3SessionOptions opt = {}, RoutingLog* log = nullptr) {
  const core::Tokenizer tok = core::Tokenizer::from_gguf(model.gguf());
  const std::vector<int32_t> prompt = tok.encode(ref.prompt_text, true, false);
  CHECK(prompt == ref.prompt);
  core::KimiK3InCoreExperts experts(model);
  kernels::ThreadPool pool(threads);
  opt.n_ctx = 128;
  opt.n_batch = 128;
  core::KimiK3Session s(model, experts, pool, opt);
  s.set_routing_observer(log);
  const int64_t V = model.config().n_vocab;
  std::vector<float> out;
  auto rows = s.forward(prompt, 0);
  out.insert(out.end(), rows.begin(), rows.end());
  int64_t pos = static_cast<int64_t>(ref.prompt.size());
  for (int32_t tok : ref.gen) {
    auto row = s.forward({&tok, 1}, pos++);
    REQUIRE(static_cast<int64_t>(row.size()) == V);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

struct Comparison {
  bool bit_identical = false;  // every logit's bits equal llama.cpp's (memcmp)
  double max_diff = 0;
  int rows_within_1e3 = 0;
  int n_rows = 0;
  int greedy_equal = 0;
  std::vector<double> row_diff;
};

Comparison compare(const std::vector<float>& ours, const Reference& ref, int64_t V) {
  Comparison c;
  c.n_rows = static_cast<int>(ref.logits.size() / V);
  c.bit_identical = ours.size() == ref.logits.size() &&
                    std::memcmp(ours.data(), ref.logits.data(), ours.size() * sizeof(float)) == 0;
  if (ours.size() != ref.logits.size()) {
    c.max_diff = std::numeric_limits<double>::quiet_NaN();  // rows missing: fails every bound
    return c;
  }
  const int n_prompt = static_cast<int>(ref.prompt.size());
  test::RunningMax max_diff;
  for (int r = 0; r < c.n_rows; ++r) {
    const size_t row = static_cast<size_t>(r * V), n = static_cast<size_t>(V);
    const double d = test::max_abs_diff(std::span(ours).subspan(row, n), std::span(ref.logits).subspan(row, n));
    c.row_diff.push_back(d);
    max_diff.add(d);
    c.rows_within_1e3 += d <= 1e-3;
    // Row n_prompt-1+s picks gen_tokens[s].
    const int s = r - (n_prompt - 1);
    if (s >= 0 && s < static_cast<int>(ref.gen.size())) c.greedy_equal += argmax(&ours[r * V], V) == ref.gen[s];
  }
  c.max_diff = max_diff.value();
  return c;
}

std::string describe(const std::string& variant, const Comparison& c, size_t n_gen) {
  std::string s = "kimi-k3 " + variant + ": max|dlogit| " + std::to_string(c.max_diff) + ", rows <= 1e-3: " +
                  std::to_string(c.rows_within_1e3) + "/" + std::to_string(c.n_rows) + ", greedy tokens equal " +
                  std::to_string(c.greedy_equal) + "/" + std::to_string(n_gen) + "\n  per-row:";
  char buf[32];
  for (double d : c.row_diff) {
    std::snprintf(buf, sizeof buf, " %.1e", d);
    s += buf;
  }
  return s;
}

}  // namespace

// Measured max |logit diff| against llama.cpp (AVX2 kernels, this machine): 0 on all 45 rows of
// the f32, f16, q8_0 and q4_k_m runs, so the README's "bit-identical" is asserted with memcmp.
TEST_CASE("kimi-k3 f32: teacher-forced logits are bit-identical to llama.cpp's on every row") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string(), {.widen_f16_to_f32 = true});
  const Reference ref = load_reference("f32");
  RoutingLog log;
  const std::vector<float> ours = run_teacher_forced(*model, ref, 2, {.kv_type = GgmlType::F32}, &log);
  const Comparison c = compare(ours, ref, model->config().n_vocab);
  MESSAGE(describe("f32", c, ref.gen.size()));
  CHECK(routing_mismatches(log, ref) == 0);
  CHECK(c.bit_identical);
  CHECK(c.greedy_equal == static_cast<int>(ref.gen.size()));
}

TEST_CASE("kimi-k3 f16: logits are bit-identical to llama.cpp's F16 run and the greedy tokens are equal") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string());
  const Reference ref = load_reference("f16");
  RoutingLog log;
  const std::vector<float> ours = run_teacher_forced(*model, ref, 2, {.kv_type = GgmlType::F32}, &log);
  const Comparison c = compare(ours, ref, model->config().n_vocab);
  MESSAGE(describe("f16", c, ref.gen.size()));
  CHECK(routing_mismatches(log, ref) == 0);
  CHECK(c.bit_identical);
  CHECK(c.greedy_equal == static_cast<int>(ref.gen.size()));
}

// Quantized files: activations are quantized to each weight's vec_dot_type as ggml does and
// summed in ggml's orders, so the logits come out bit-identical to llama.cpp's.
void check_quantized(const char* variant) {
  const fs::path gguf = k3_dir() / ("kimi-k3-" + std::string(variant) + ".gguf");
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string());
  const Reference ref = load_reference(variant);
  RoutingLog log;
  const std::vector<float> ours = run_teacher_forced(*model, ref, 2, {.kv_type = GgmlType::F32}, &log);
  const Comparison c = compare(ours, ref, model->config().n_vocab);
  const int routing = routing_mismatches(log, ref);
  MESSAGE(describe(variant, c, ref.gen.size()) << "\n  routing records differing from llama.cpp: " << routing);
  CHECK(routing == 0);
  CHECK(c.bit_identical);
  CHECK(c.greedy_equal == static_cast<int>(ref.gen.size()));
}

TEST_CASE("kimi-k3 q8_0: teacher-forced logits are bit-identical to llama.cpp's on every row") {
  check_quantized("q8_0");
}

// Q4_K matrices that llama.cpp repacks (8k rows, 2-D or expert tensors) are summed in the order of
// its repacked GEMM (4-token groups) and GEMV, and the Q4_K/Q5_K/Q6_K/Q5_0 vec_dots as ggml's AVX2
// code sums them: the logits come out bit-identical to llama.cpp's on all 45 rows.
TEST_CASE("kimi-k3 q4_k_m: teacher-forced logits are bit-identical to llama.cpp's on every row") {
  check_quantized("q4_k_m");
}

TEST_CASE("sluice run on a kimi-k3 model prints llama.cpp's greedy continuation") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  const Reference ref = load_reference("f32");
  std::string ids;
  for (int32_t t : ref.prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const auto r = test::run_sluice("run -m '" + gguf.string() + "' --widen-f16 --kv-type f32 -n 16 --temp 0 -t 2 --tokens " + ids);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::string want;
  for (const auto& piece : ref.json["gen_pieces"]) want += piece.get<std::string>();
  test::require_text(r.out, "sluice run's continuation");
  CHECK(r.out == test::require_text(want, "llama.cpp's continuation") + "\n");
  CHECK(r.err.find("recurrent state") != std::string::npos);
}

TEST_CASE("kimi-k3 with an F16 MLA cache or the chunked KDA prefill stays within tolerance of llama.cpp's F32 run") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string(), {.widen_f16_to_f32 = true});
  const Reference ref = load_reference("f32");
  const Comparison f16_kv = compare(run_teacher_forced(*model, ref, 2, {.kv_type = GgmlType::F16}), ref, 2048);
  MESSAGE(describe("f32 weights, F16 MLA cache", f16_kv, ref.gen.size()));
  CHECK(f16_kv.max_diff <= 4e-3);  // measured 2.1e-3
  CHECK(f16_kv.greedy_equal == static_cast<int>(ref.gen.size()));
  const Comparison chunked =
      compare(run_teacher_forced(*model, ref, 2, {.kv_type = GgmlType::F32, .chunked_kda = true}), ref, 2048);
  MESSAGE(describe("f32 weights, chunked KDA prefill", chunked, ref.gen.size()));
  CHECK(chunked.max_diff <= 1.5e-4);  // measured 7.4e-5
  CHECK(chunked.greedy_equal == static_cast<int>(ref.gen.size()));
}

// MLA's decompressed prefill form (core/compute/mla_decompressed_attention.h), forced on the prompt
// batch: another order than llama.cpp's, held to the absorbed form's own distance with the same F16
// cache (1.5x + 1e-3), the greedy tokens llama.cpp's, and the logits not the absorbed form's bits.
TEST_CASE("kimi-k3's decompressed MLA prefill stays as close to llama.cpp's F32 run as the absorbed form") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string(), {.widen_f16_to_f32 = true});
  const Reference ref = load_reference("f32");
  const int64_t V = model->config().n_vocab;
  const auto absorbed_logits =
      run_teacher_forced(*model, ref, 2, {.kv_type = GgmlType::F16, .mla_decompress_cells = -1});
  const auto decompressed_logits = run_teacher_forced(
      *model, ref, 2, {.kv_type = GgmlType::F16, .mla_decompress_cells = 0, .mla_decompress_tokens = 2});
  const Comparison absorbed = compare(absorbed_logits, ref, V), decompressed = compare(decompressed_logits, ref, V);
  MESSAGE(describe("F16 MLA cache, absorbed", absorbed, ref.gen.size()));
  MESSAGE(describe("F16 MLA cache, decompressed", decompressed, ref.gen.size()));
  REQUIRE(absorbed_logits.size() == decompressed_logits.size());
  CHECK(std::memcmp(absorbed_logits.data(), decompressed_logits.data(), absorbed_logits.size() * sizeof(float)) != 0);
  CHECK(decompressed.max_diff <= 1.5 * absorbed.max_diff + 1e-3);
  CHECK(decompressed.greedy_equal == static_cast<int>(ref.gen.size()));
}

namespace {

// Reads each acquired expert's gate/up/down slices from the file (no caching): what an out-of-core
// source does, through the same ExpertSource interface the in-core model serves.
class FileExperts final : public core::ExpertSource {
 public:
  FileExperts(const std::string& path, const core::KimiK3Model& model) : reader_(path), model_(model) {}
  core::ExpertWeights acquire(int layer, int expert) override {
    ++acquired;
    const std::string b = "blk." + std::to_string(layer) + ".";
    auto slice = [&](const char* name, std::vector<std::byte>& buf) {
      const core::GgufTensorInfo& t = model_.gguf().tensor(b + name);
      const uint64_t bytes = t.row_bytes * static_cast<uint64_t>(t.ne[1]);
      buf.resize(bytes);
      reader_.read_sync(t.file_offset + bytes * static_cast<uint64_t>(expert), buf);
      return kernels::WeightMatrix{t.type, buf.data(), t.ne[0], t.ne[1], t.row_bytes,
                                   kernels::ggml_repacks(t.type, t.ne[1]) ? kernels::GgmlRepack::mul_mat_id
                                                                          : kernels::GgmlRepack::none};
    };
    return {slice("ffn_gate_exps.weight", gate_), slice("ffn_up_exps.weight", up_), slice("ffn_down_exps.weight", down_)};
  }
  void release(int, int) override {}
  int acquired = 0;

 private:
  io::PreadReader reader_;
  const core::KimiK3Model& model_;
  std::vector<std::byte> gate_, up_, down_;
};

}  // namespace

TEST_CASE("kimi-k3 routed experts streamed from the file through ExpertSource give bit-identical logits") {
  const fs::path gguf = k3_dir() / "kimi-k3-q8_0.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto full = core::KimiK3Model::load(gguf.string());
  auto lean = core::KimiK3Model::load(gguf.string(), {.load_routed_experts = false});
  CHECK(lean->weight_bytes() < full->weight_bytes());
  CHECK_THROWS_AS(core::KimiK3InCoreExperts{*lean}, Error);
  const Reference ref = load_reference("q8_0");
  kernels::ThreadPool pool(2);
  core::KimiK3InCoreExperts in_core(*full);
  FileExperts streamed(gguf.string(), *lean);
  core::KimiK3Session a(*full, in_core, pool, {.n_ctx = 64, .n_batch = 64, .kv_type = GgmlType::F32});
  core::KimiK3Session b(*lean, streamed, pool, {.n_ctx = 64, .n_batch = 64, .kv_type = GgmlType::F32});
  const auto la = a.forward(ref.prompt, 0);
  const std::vector<float> first(la.begin(), la.end());
  const auto lb = b.forward(ref.prompt, 0);
  CHECK(std::equal(first.begin(), first.end(), lb.begin(), lb.end()));
  CHECK(streamed.acquired > 0);
}

TEST_CASE("kimi-k3 prompt split over several forward calls gives the same logits (state carried exactly)") {
  const fs::path gguf = k3_dir() / "kimi-k3-f16.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  auto model = core::KimiK3Model::load(gguf.string(), {.widen_f16_to_f32 = true});
  const Reference ref = load_reference("f32");
  core::KimiK3InCoreExperts experts(*model);
  kernels::ThreadPool pool(2);
  core::KimiK3Session s(*model, experts, pool, {.n_ctx = 64, .n_batch = 10, .kv_type = GgmlType::F32});
  const int64_t V = model->config().n_vocab, n = static_cast<int64_t>(ref.prompt.size());
  test::RunningMax diff;
  for (int64_t i = 0; i < n; i += 10) {
    const int64_t m = std::min<int64_t>(10, n - i);
    const auto rows = s.forward({ref.prompt.data() + i, static_cast<size_t>(m)}, i);
    diff.add(test::max_abs_diff(rows.first(static_cast<size_t>(m * V)),
                          std::span(ref.logits).subspan(static_cast<size_t>(i * V), static_cast<size_t>(m * V))));
  }
  const double max_diff = diff.value();
  MESSAGE("kimi-k3 f32, prompt in chunks of 10: max|dlogit| " << max_diff);
  CHECK(max_diff == 0);  // measured 0: the chunks sum in the same orders as one batch here
}

TEST_CASE("a kimi-k3 model loaded to stream its layers plans what it loads and refuses a session without its stream") {
  const fs::path gguf = k3_dir() / "kimi-k3-q8_0.gguf";
  REQUIRE_MESSAGE(fs::exists(gguf), "reference model missing: " << gguf);
  const core::KimiK3LoadOptions lean_options{.load_routed_experts = false, .stream_layer_tensors = true};
  io::PreadReader reader(gguf.string());
  auto planned = core::KimiK3Model::plan(reader, lean_options);
  auto lean = core::KimiK3Model::load(gguf.string(), lean_options);
  auto full = core::KimiK3Model::load(gguf.string(), {.load_routed_experts = false});
  // plan() reads nothing and sizes exactly what load() keeps; streamed tensors keep their shapes.
  CHECK(planned->weight_bytes() == lean->weight_bytes());
  CHECK(planned->streamed().size() == lean->streamed().size());
  CHECK_FALSE(planned->token_embd());
  CHECK(lean->weight_bytes() < full->weight_bytes() / 2);
  REQUIRE_FALSE(lean->streamed().empty());
  for (const auto& t : lean->streamed()) {
    CAPTURE(t.info->name);
    const core::Tensor& view = t.member ? lean->layer(t.block).*t.member : lean->output();
    CHECK_FALSE(view);  // left out: a LayerSource supplies it
    CHECK(view.ne == t.info->ne);
    CHECK(t.info->name.find("_exps.") == std::string::npos);
  }
  CHECK(lean->token_embd());
  kernels::ThreadPool pool(1);
  FileExperts experts(gguf.string(), *lean);
  CHECK_THROWS_WITH_AS(core::KimiK3Session(*lean, experts, pool, {.n_ctx = 64, .n_batch = 4}),
                       doctest::Contains("needs their LayerSource"), Error);
}
