// Equivalence tests for model forms with no llama.cpp reference file: each writes a modified
// copy of a reference model whose outputs must equal (or stay within 1e-4 of) another run.
#include <doctest/doctest.h>

#include "tests/model_files.h"

namespace {

using sluice::GgmlType;
using namespace sluice;
using namespace sluice::test;

const core::LoadOptions kF32{.widen_f16_to_f32 = true};

TeacherForced run_file(const std::filesystem::path& path, const Manifest& m, core::LoadOptions o = kF32) {
  const core::Model model = core::Model::load(path.string(), o);
  return teacher_force(model, m.prompt, m.gen, GgmlType::F32);
}

}  // namespace

TEST_CASE("deepseek2 in the older attn_kv_b form gives the same logits as split attn_k_b/attn_v_b") {
  const auto src_path = tiny_dir("deepseek2") / "deepseek2-f16.gguf";
  SourceModel src(src_path);
  const int64_t H = 4, N = 128, V = 128, L = 256;
  const auto path = write_modified(src, "kv_b", [&](core::GgufWriter& w) {
    for (int il = 0; il < 3; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      const std::vector<float> k_b = src.floats(b + "attn_k_b.weight");  // [N, L, H]
      const std::vector<float> v_b = src.floats(b + "attn_v_b.weight");  // [L, V, H]
      std::vector<float> kv_b(static_cast<size_t>(L * H * (N + V)));     // [L, H * (N + V)]
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < N; ++d)
          for (int64_t c = 0; c < L; ++c) kv_b[((h * (N + V) + d) * L + c)] = k_b[(h * L + c) * N + d];
        for (int64_t e = 0; e < V; ++e)
          for (int64_t c = 0; c < L; ++c) kv_b[((h * (N + V) + N + e) * L + c)] = v_b[(h * V + e) * L + c];
      }
      w.remove_tensor(b + "attn_k_b.weight");
      w.remove_tensor(b + "attn_v_b.weight");
      w.add_tensor(b + "attn_kv_b.weight", GgmlType::F16, {L, H * (N + V)}, to_type(GgmlType::F16, kv_b, L));
    }
    // Older files describe the MHA head sizes and have no *_mla keys.
    w.remove("deepseek2.attention.key_length_mla");
    w.remove("deepseek2.attention.value_length_mla");
    w.set_u32("deepseek2.attention.key_length", 192);
    w.set_u32("deepseek2.attention.value_length", 128);
  });
  const Manifest m = load_manifest("deepseek2", "f32");
  for (bool widen : {true, false}) {
    const TeacherForced a = run_file(src_path, m, {.widen_f16_to_f32 = widen});
    const TeacherForced b = run_file(path, m, {.widen_f16_to_f32 = widen});
    const double d = max_abs_diff(a.logits, b.logits);
    MESSAGE("attn_kv_b vs split form (" << (widen ? "f32" : "f16") << " weights): max |logit diff| " << d);
    CHECK(d <= 1e-4);
  }
}

TEST_CASE("deepseek2 without q_lora runs and is batch-consistent") {
  // attn_q = attn_q_b * attn_q_a (no norm in between: not the same function, so this checks
  // the plain-attn_q path for self-consistency rather than against the q_lora model).
  SourceModel src(tiny_dir("deepseek2") / "deepseek2-f16.gguf");
  const int64_t E = 256, Q = 256, QH = 4 * 192;
  const auto path = write_modified(src, "no_q_lora", [&](core::GgufWriter& w) {
    for (int il = 0; il < 3; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      const std::vector<float> qa = src.floats(b + "attn_q_a.weight");  // [E, Q]: Q rows of E
      const std::vector<float> qb = src.floats(b + "attn_q_b.weight");  // [Q, QH]: QH rows of Q
      std::vector<float> q(static_cast<size_t>(QH * E), 0.0f);            // [E, QH]
      for (int64_t r = 0; r < QH; ++r)
        for (int64_t k = 0; k < Q; ++k) {
          const float s = qb[r * Q + k] * 4.0f;  // keep q at a similar scale as the normalized path
          for (int64_t c = 0; c < E; ++c) q[r * E + c] += s * qa[k * E + c];
        }
      for (const char* n : {"attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight"}) w.remove_tensor(b + n);
      w.add_tensor(b + "attn_q.weight", GgmlType::F16, {E, QH}, to_type(GgmlType::F16, q, E));
    }
    w.remove("deepseek2.attention.q_lora_rank");
  });
  const core::Model model = core::Model::load(path.string(), kF32);
  CHECK(model.config().q_lora_rank == 0);
  const Manifest m = load_manifest("deepseek2", "f32");
  const TeacherForced batch = teacher_force(model, m.prompt, m.gen, GgmlType::F32);
  // The same tokens one at a time.
  std::vector<int32_t> all = m.prompt;
  all.insert(all.end(), m.gen.begin(), m.gen.end());
  const TeacherForced single = teacher_force(model, {all[0]}, {all.begin() + 1, all.end()}, GgmlType::F32);
  const double d = max_abs_diff(batch.logits, single.logits);
  MESSAGE("no q_lora: batch vs one token at a time, max |logit diff| " << d);
  CHECK(d <= 1e-4);
  for (const auto& [key, rec] : batch.routing.records) CHECK(single.routing.records.at(key).experts == rec.experts);
  const TeacherForced with_lora = run_file(tiny_dir("deepseek2") / "deepseek2-f16.gguf", m);
  CHECK(max_abs_diff(batch.logits, with_lora.logits) > 1e-3);  // the plain path was taken
}

TEST_CASE("a dense llama equals a llama MoE whose experts are all the same FFN") {
  SourceModel src(tiny_dir("llama-moe") / "llama-moe-f16.gguf");
  const int64_t E = 256, F = 512;
  auto expert0 = [&](const std::string& name, int64_t row) {
    std::vector<std::byte> all = src.bytes(name);
    const size_t one = ggml_row_bytes(GgmlType::F16, static_cast<uint64_t>(row)) * static_cast<size_t>(name.find("down") != std::string::npos ? E : F);
    return std::vector<std::byte>(all.begin(), all.begin() + static_cast<ptrdiff_t>(one));
  };
  const auto dense = write_modified(src, "dense", [&](core::GgufWriter& w) {
    for (int il = 0; il < 2; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      w.add_tensor(b + "ffn_gate.weight", GgmlType::F16, {E, F}, expert0(b + "ffn_gate_exps.weight", E));
      w.add_tensor(b + "ffn_up.weight", GgmlType::F16, {E, F}, expert0(b + "ffn_up_exps.weight", E));
      w.add_tensor(b + "ffn_down.weight", GgmlType::F16, {F, E}, expert0(b + "ffn_down_exps.weight", F));
      for (const char* n : {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"})
        w.remove_tensor(b + n);
    }
    w.remove("llama.expert_count");
    w.remove("llama.expert_used_count");
  });
  const auto same = write_modified(src, "same_experts", [&](core::GgufWriter& w) {
    for (int il = 0; il < 2; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      for (const char* n : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
        const std::string name = b + n;
        const auto shape = src.shape(name);
        const std::vector<std::byte> one = expert0(name, shape[0]);
        std::vector<std::byte> all;
        for (int e = 0; e < 4; ++e) all.insert(all.end(), one.begin(), one.end());
        w.remove_tensor(name);
        w.add_tensor(name, GgmlType::F16, shape, all);
      }
    }
  });
  const Manifest m = load_manifest("llama-moe", "f32");
  const core::Model dense_model = core::Model::load(dense.string(), kF32);
  CHECK(dense_model.config().n_expert == 0);
  const TeacherForced a = teacher_force(dense_model, m.prompt, m.gen, GgmlType::F32);
  const TeacherForced b = run_file(same, m);
  const double d = max_abs_diff(a.logits, b.logits);
  MESSAGE("dense llama vs MoE of identical experts: max |logit diff| " << d);
  CHECK(d <= 1e-4);
  CHECK(a.routing.records.empty());
}

TEST_CASE("deepseek2 with softmax gating routes as a hand-computed router") {
  SourceModel src(tiny_dir("deepseek2") / "deepseek2-f16.gguf");
  const auto path = write_modified(src, "softmax", [&](core::GgufWriter& w) {
    w.set_u32("deepseek2.expert_gating_func", 1);
    w.set_u32("deepseek2.expert_group_count", 1);
    w.set_u32("deepseek2.expert_group_used_count", 1);
  });
  const core::Model model = core::Model::load(path.string(), kF32);
  CHECK(model.config().gating == core::GatingFunc::softmax);
  const Manifest m = load_manifest("deepseek2", "f32");
  const TeacherForced run = teacher_force(model, m.prompt, {}, GgmlType::F32);
  CHECK(run.routing.records.size() == m.prompt.size() * 2);
  for (const auto& [key, rec] : run.routing.records) {
    // Weights are softmax probabilities of the chosen experts, renormalized and x2.827: they sum
    // to the scale and come in descending order of (prob + bias), which the bias may reorder only
    // by less than its range (0.2).
    double sum = 0;
    for (float v : rec.weights) sum += v;
    CHECK(sum == doctest::Approx(2.827).epsilon(1e-5));
    CHECK(rec.groups.empty());
  }
}
