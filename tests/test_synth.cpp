#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "core/gguf/gguf.h"
#include "core/gguf/gguf_split_writer.h"
#include "core/gguf/gguf_stream_writer.h"
#include "core/gguf/gguf_writer.h"
#include "synth/synth.h"
#include "synth/synth_vocab.h"
#include "io/pread_reader.h"
#include "io/split_set.h"
#include "kernels/quant.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using sluice::Error;
using sluice::ErrorCode;
using sluice::GgmlType;
using sluice::core::GgufFile;
using sluice::core::GgufStreamWriter;
using sluice::core::GgufValue;
using sluice::core::GgufValueType;
namespace synth = sluice::core::synth;

namespace {

GgufFile parse(const fs::path& p) {
  sluice::io::PreadReader r(p.string());
  return GgufFile::parse(r);
}

fs::path synth_file(synth::SynthOptions o, const std::string& name) {
  o.out = (sluice::test::temp_dir("synth") / name).string();
  synth::synthesize(o);
  return o.out;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case GgufValueType::string: return a.s == b.s;
    case GgufValueType::f32: case GgufValueType::f64: return a.f == b.f;
    case GgufValueType::i8: case GgufValueType::i16: case GgufValueType::i32: case GgufValueType::i64: return a.i == b.i;
    case GgufValueType::array: return a.elem_type == b.elem_type && a.count == b.count;
    default: return a.u == b.u;
  }
}

// Every value of every tensor is finite after ggml's dequantization; returns the rms of
// `probe` (a tensor name) for a scale check.
double check_finite(const GgufFile& f, const fs::path& path, const std::string& probe) {
  sluice::io::PreadReader r(path.string());
  double probe_rms = -1;
  for (const auto& t : f.tensors()) {
    CAPTURE(t.name);
    REQUIRE(sluice::kernels::is_supported(t.type));
    std::vector<std::byte> buf(t.row_bytes);
    std::vector<float> vals(t.ne[0]);
    const uint64_t rows = t.n_bytes / t.row_bytes;
    const uint64_t step = std::max<uint64_t>(1, rows / 64);  // a spread of rows per tensor
    double ss = 0;
    uint64_t n = 0;
    bool finite = true;
    for (uint64_t row = 0; row < rows; row += step) {
      r.read_sync(t.file_offset + row * t.row_bytes, buf);
      sluice::kernels::dequantize_row(t.type, buf.data(), vals.data(), t.ne[0]);
      for (float v : vals) {
        finite = finite && std::isfinite(v);
        ss += static_cast<double>(v) * v;
      }
      n += vals.size();
    }
    CHECK(finite);
    CHECK(ss > 0);
    if (t.name == probe) probe_rms = std::sqrt(ss / n);
  }
  return probe_rms;
}

}  // namespace

TEST_CASE("synth tiny presets carry the reference models' keys, tensor shapes and llama-quantize's types") {
  struct Case { const char* preset; const char* dir; uint32_t layers; const char* quant; const char* ref; };
  const Case cases[] = {
      {"tiny-deepseek2", "tiny/deepseek2", 3, "Q2_K", "deepseek2-q2_k.gguf"},
      {"tiny-deepseek2", "tiny/deepseek2", 3, "Q4_K_M", "deepseek2-q4_k_m.gguf"},
      {"tiny-deepseek2", "tiny/deepseek2", 3, "Q8_0", "deepseek2-q8_0.gguf"},
      {"tiny-deepseek2", "tiny/deepseek2", 3, "F16", "deepseek2-f16.gguf"},
      {"tiny-qwen3moe", "tiny/qwen3moe", 2, "Q4_K_M", "qwen3moe-q4_k_m.gguf"},
      {"tiny-qwen3moe", "tiny/qwen3moe", 2, "F16", "qwen3moe-f16.gguf"},
      {"tiny-llama-moe", "tiny/llama-moe", 2, "Q4_K_M", "llama-moe-q4_k_m.gguf"},
      // kimi-k3's F16 master stores the conv taps 4-d as the converter does; llama-quantize's
      // outputs (and synth) use 3-d, so only the quantized files are compared.
      {"tiny-kimi-k3", "kimi-k3", 4, "Q4_K_M", "kimi-k3-q4_k_m.gguf"},
      {"tiny-kimi-k3", "kimi-k3", 4, "Q8_0", "kimi-k3-q8_0.gguf"},
  };
  for (const Case& c : cases) {
    const std::string ref_name = c.ref;
    CAPTURE(ref_name);
    const fs::path ref_path = sluice::test::require_file(sluice::test::reference_dir() / c.dir / c.ref);
    synth::SynthOptions o;
    o.preset = c.preset;
    o.layers = c.layers;
    o.quant = c.quant;
    const fs::path mine_path = synth_file(o, std::string(c.preset) + "-" + c.quant + ".gguf");
    const GgufFile ref = parse(ref_path), mine = parse(mine_path);
    for (const auto& kv : ref.metadata()) {
      CAPTURE(kv.key);
      const GgufValue* v = mine.find(kv.key);
      if (kv.key.rfind("tokenizer.", 0) == 0) {
        if (ref.get_string("tokenizer.ggml.model") == "gpt2") CHECK(v != nullptr);  // same tokenizer kind
        continue;
      }
      REQUIRE(v != nullptr);
      if (kv.key != "general.name") CHECK(same_value(kv.value, *v));
    }
    CHECK(mine.tensors().size() == ref.tensors().size());
    for (const auto& t : ref.tensors()) {
      CAPTURE(t.name);
      const auto* m = mine.find_tensor(t.name);
      REQUIRE(m != nullptr);
      CHECK(m->type == t.type);
      CHECK(m->n_dims == t.n_dims);
      CHECK(m->ne == t.ne);
    }
    const double embd_rms = check_finite(mine, mine_path, "token_embd.weight");
    CHECK(embd_rms == doctest::Approx(1.0).epsilon(0.35));
  }
}

TEST_CASE("synth presets declare the real models' per-layer shapes and quant mixes") {
  struct Expect { const char* name; GgmlType type; std::vector<int64_t> ne; };
  struct Case {
    const char* preset; const char* quant; uint32_t layers; std::vector<Expect> expect; size_t n_tensors;
    uint32_t expert_ff = 0;
  };
  const Case cases[] = {
      {"kimi-k2", "Q2_K", 4,
       {{"token_embd.weight", GgmlType::Q2_K, {7168, 163840}},
        {"output.weight", GgmlType::Q6_K, {7168, 163840}},
        {"blk.0.ffn_gate.weight", GgmlType::Q2_K, {7168, 18432}},
        {"blk.0.ffn_down.weight", GgmlType::Q3_K, {18432, 7168}},
        {"blk.1.attn_q_a.weight", GgmlType::Q2_K, {7168, 1536}},
        {"blk.1.attn_q_b.weight", GgmlType::Q2_K, {1536, 12288}},
        {"blk.1.attn_kv_a_mqa.weight", GgmlType::Q2_K, {7168, 576}},
        {"blk.1.attn_k_b.weight", GgmlType::Q4_0, {128, 512, 64}},
        {"blk.1.attn_v_b.weight", GgmlType::Q2_K, {512, 128, 64}},
        {"blk.1.attn_output.weight", GgmlType::Q3_K, {8192, 7168}},
        {"blk.1.ffn_gate_inp.weight", GgmlType::F32, {7168, 384}},
        {"blk.1.exp_probs_b.bias", GgmlType::F32, {384}},
        {"blk.1.ffn_gate_exps.weight", GgmlType::Q2_K, {7168, 2048, 384}},
        {"blk.3.ffn_up_exps.weight", GgmlType::Q2_K, {7168, 2048, 384}},
        {"blk.3.ffn_down_exps.weight", GgmlType::Q3_K, {2048, 7168, 384}},
        {"blk.3.ffn_down_shexp.weight", GgmlType::Q3_K, {2048, 7168}},
        {"blk.3.attn_kv_a_norm.weight", GgmlType::F32, {512}}},
       3 + 13 + 3 * 18},
      {"deepseek-v3", "Q4_K_M", 5,
       {{"token_embd.weight", GgmlType::Q4_K, {7168, 129280}},
        {"blk.2.ffn_up.weight", GgmlType::Q4_K, {7168, 18432}},
        {"blk.3.ffn_gate_exps.weight", GgmlType::Q4_K, {7168, 2048, 256}},
        {"blk.1.attn_k_b.weight", GgmlType::Q5_0, {128, 512, 64}},
        {"blk.4.ffn_down_exps.weight", GgmlType::Q6_K, {2048, 7168, 256}},  // use_more_bits(4, 5)
        {"blk.3.ffn_down_exps.weight", GgmlType::Q4_K, {2048, 7168, 256}}},
       3 + 3 * 13 + 2 * 18},
      {"qwen3-30b-a3b", "Q4_K_M", 4,
       {{"blk.0.attn_q.weight", GgmlType::Q4_K, {2048, 4096}},
        {"blk.0.attn_k.weight", GgmlType::Q4_K, {2048, 512}},
        {"blk.0.attn_v.weight", GgmlType::Q4_K, {2048, 512}},
        {"blk.2.attn_v.weight", GgmlType::Q6_K, {2048, 512}},  // use_more_bits(2, 4)
        {"blk.0.attn_q_norm.weight", GgmlType::F32, {128}},
        {"blk.0.attn_output.weight", GgmlType::Q4_K, {4096, 2048}},
        {"blk.0.ffn_gate_inp.weight", GgmlType::F32, {2048, 128}},
        {"blk.0.ffn_up_exps.weight", GgmlType::Q4_K, {2048, 768, 128}},
        {"blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {768, 2048, 128}},
        {"blk.3.ffn_down_exps.weight", GgmlType::Q6_K, {768, 2048, 128}},
        {"token_embd.weight", GgmlType::Q4_K, {2048, 151936}}},
       3 + 4 * 12},
      {"qwen3-235b-a22b", "Q2_K", 2,
       {{"blk.1.attn_q.weight", GgmlType::Q2_K, {4096, 8192}},
        {"blk.1.attn_v.weight", GgmlType::Q4_K, {4096, 512}},  // n_gqa 16 >= 4
        {"blk.1.ffn_gate_exps.weight", GgmlType::Q2_K, {4096, 1536, 128}},
        {"blk.1.ffn_down_exps.weight", GgmlType::Q3_K, {1536, 4096, 128}}},
       3 + 2 * 12},
      {"mixtral-8x7b", "Q4_K_M", 3,
       {{"blk.0.attn_q.weight", GgmlType::Q4_K, {4096, 4096}},
        {"blk.0.attn_k.weight", GgmlType::Q8_0, {4096, 1024}},  // 8 experts
        {"blk.1.attn_v.weight", GgmlType::Q8_0, {4096, 1024}},
        {"blk.1.attn_output.weight", GgmlType::Q5_K, {4096, 4096}},
        {"blk.1.ffn_gate_exps.weight", GgmlType::Q4_K, {4096, 14336, 8}},
        {"blk.1.ffn_down_exps.weight", GgmlType::Q4_K, {14336, 4096, 8}},
        {"blk.2.ffn_down_exps.weight", GgmlType::Q6_K, {14336, 4096, 8}},
        {"token_embd.weight", GgmlType::Q4_K, {4096, 32000}}},
       3 + 3 * 10},
      {"kimi-k2", "Q4_K_M", 3,  // --expert-ff 512: routed and shared experts narrow, the dense FFN and MLA do not
       {{"blk.0.ffn_gate.weight", GgmlType::Q4_K, {7168, 18432}},
        {"blk.1.attn_output.weight", GgmlType::Q4_K, {8192, 7168}},
        {"blk.1.ffn_gate_exps.weight", GgmlType::Q4_K, {7168, 512, 384}},
        {"blk.2.ffn_up_exps.weight", GgmlType::Q4_K, {7168, 512, 384}},
        {"blk.2.ffn_down_exps.weight", GgmlType::Q6_K, {512, 7168, 384}},
        {"blk.2.ffn_up_shexp.weight", GgmlType::Q4_K, {7168, 512}},
        {"blk.2.ffn_down_shexp.weight", GgmlType::Q6_K, {512, 7168}}},
       3 + 13 + 2 * 18, 512},
      {"mixtral-8x7b", "Q4_K_M", 1,  // llama-arch experts are the FFN: feed_forward_length narrows too
       {{"blk.0.ffn_gate_exps.weight", GgmlType::Q4_K, {4096, 1024, 8}},
        {"blk.0.ffn_down_exps.weight", GgmlType::Q6_K, {1024, 4096, 8}}},
       3 + 10, 1024},
      {"kimi-k3", "MXFP4_MOE", 5,  // blocks 0-2 KDA (0 dense), 3 MLA, 4 (last) MLA
       {{"token_embd.weight", GgmlType::Q8_0, {7168, 163840}},
        {"output.weight", GgmlType::Q8_0, {7168, 163840}},
        {"output_res_score.weight", GgmlType::F32, {7168}},
        {"blk.0.ffn_up.weight", GgmlType::Q8_0, {7168, 33792}},
        {"blk.1.attn_q.weight", GgmlType::Q8_0, {7168, 12288}},
        {"blk.1.ssm_conv1d_k.weight", GgmlType::F32, {4, 1, 12288}},
        {"blk.1.ssm_f_b.weight", GgmlType::Q8_0, {128, 12288}},
        {"blk.1.ssm_beta.weight", GgmlType::Q8_0, {7168, 96}},
        {"blk.1.ssm_a", GgmlType::F32, {96}},
        {"blk.1.attn_output.weight", GgmlType::Q8_0, {12288, 7168}},
        {"blk.1.ffn_gate_inp.weight", GgmlType::F32, {7168, 896}},
        {"blk.1.ffn_routed_down.weight", GgmlType::Q8_0, {7168, 3584}},
        {"blk.1.ffn_gate_exps.weight", GgmlType::MXFP4, {3584, 3072, 896}},
        {"blk.1.ffn_down_exps.weight", GgmlType::MXFP4, {3072, 3584, 896}},
        {"blk.1.ffn_routed_up.weight", GgmlType::Q8_0, {3584, 7168}},
        {"blk.1.ffn_down_shexp.weight", GgmlType::Q8_0, {6144, 7168}},
        {"blk.3.attn_q_b.weight", GgmlType::Q8_0, {1536, 96 * 192}},
        {"blk.3.attn_gate.weight", GgmlType::Q8_0, {7168, 96 * 128}},
        {"blk.4.attn_kv_a_mqa.weight", GgmlType::Q8_0, {7168, 576}}},
       4 + 21 + 2 * 29 + 2 * 24},
  };
  for (const Case& c : cases) {
    const std::string preset_name = c.preset;
    CAPTURE(preset_name);
    synth::SynthOptions o;
    o.preset = c.preset;
    o.quant = c.quant;
    o.layers = c.layers;
    o.expert_ff = c.expert_ff;
    o.out = "unused.gguf";
    const synth::SynthPlan plan = synth::plan_synth(o);
    if (c.expert_ff != 0) CHECK(plan.preset.n_ff_exp == c.expert_ff);
    GgufStreamWriter w;
    synth::declare_model(plan, o, w);
    std::map<std::string, const sluice::core::StreamTensor*> by_name;
    for (const auto& t : w.tensors()) by_name[t.name] = &t;
    CHECK(w.tensors().size() == c.n_tensors);
    for (const Expect& e : c.expect) {
      const std::string tensor_name = e.name;
      CAPTURE(tensor_name);
      REQUIRE(by_name.count(e.name));
      const auto& t = *by_name[e.name];
      CHECK(t.type == e.type);
      REQUIRE(t.n_dims == e.ne.size());
      for (size_t d = 0; d < e.ne.size(); ++d) CHECK(t.ne[d] == e.ne[d]);
    }
  }
}

TEST_CASE("synth writes a real-shape model whose blocks dequantize to finite values and whose routers match the design") {
  synth::SynthOptions o;
  o.preset = "qwen3-30b-a3b";
  o.layers = 1;
  o.experts = 4;
  o.quant = "Q2_K";
  // A small vocabulary keeps token_embd small.
  o.vocab_path = sluice::test::require_file(sluice::test::reference_dir() / "tiny/qwen3moe/qwen3moe-f16.gguf").string();
  const fs::path path = synth_file(o, "qwen3-30b-1L.gguf");
  const GgufFile f = parse(path);
  CHECK(f.get_uint("qwen3moe.expert_count") == 4);
  CHECK(f.get_string("general.architecture") == "qwen3moe");
  const auto& up = f.tensor("blk.0.ffn_up_exps.weight");
  CHECK(up.ne == std::array<int64_t, 4>{2048, 768, 4, 1});
  CHECK(up.type == GgmlType::Q2_K);
  check_finite(f, path, "");

  // The stored router is the designed one, bit for bit.
  o.out = path.string();
  const synth::SynthPlan plan = synth::plan_synth(o);
  const synth::RouterWeights rw = synth::block_router(plan, o, 0);
  const auto& gi = f.tensor("blk.0.ffn_gate_inp.weight");
  std::vector<float> stored(gi.n_bytes / 4);
  sluice::io::PreadReader r(path.string());
  r.read_sync(gi.file_offset, std::as_writable_bytes(std::span<float>(stored)));
  CHECK(stored == rw.w);
}

TEST_CASE("synth keeps every value finite when a model uses all of its experts") {
  synth::SynthOptions o;
  o.preset = "tiny-deepseek2";
  o.layers = 2;
  o.experts = 4;  // 4 used of 4: no selection threshold for the bias design
  o.quant = "Q4_K_M";
  const fs::path path = synth_file(o, "all-used.gguf");
  const GgufFile f = parse(path);
  CHECK(f.get_uint("deepseek2.expert_used_count") == 4);
  check_finite(f, path, "");
}

TEST_CASE("synth is deterministic for a seed and differs across seeds") {
  synth::SynthOptions o;
  o.preset = "tiny-qwen3moe";
  o.layers = 2;
  o.quant = "Q4_K_M";
  const auto a = sluice::test::read_file(synth_file(o, "a.gguf"));
  const auto b = sluice::test::read_file(synth_file(o, "b.gguf"));
  o.seed = 2;
  const auto c = sluice::test::read_file(synth_file(o, "c.gguf"));
  CHECK(a == b);
  REQUIRE(a.size() == c.size());  // same layout
  CHECK(a != c);
}

TEST_CASE("the built-in vocabulary is a valid byte-level BPE vocabulary of the preset's size") {
  const synth::Preset& p = synth::find_preset("kimi-k2");
  const synth::BuiltinVocab v = synth::make_builtin_vocab(p, 163840);
  REQUIRE(v.tokens.size() == 163840);
  REQUIRE(v.token_type.size() == v.tokens.size());
  std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
  CHECK(seen.size() == v.tokens.size());  // unique
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.find(' ');
    REQUIRE(sp != std::string::npos);
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    if (!seen.count(a) || !seen.count(b) || v.tokens[256 + i] != a + b) {
      FAIL_CHECK("merge " << i << " '" << m << "' is not made of earlier tokens");
      break;
    }
  }
  CHECK(v.tokens[v.bos] == "[BOS]");
  CHECK(v.token_type[v.eos] == 3);
  CHECK(v.tokens[static_cast<size_t>(v.eot)] == "<|im_end|>");
  CHECK(v.tokens['a'] == "a");
  CHECK(v.tokens[' '] == "\xC4\xA0");  // GPT-2 spells the space byte U+0120
  CHECK_THROWS_AS(synth::make_builtin_vocab(p, 200), Error);
}

TEST_CASE("kimi-k2 carries Kimi K2 Instruct's chat template verbatim") {
  const fs::path tmpl = sluice::test::reference_dir() / "templates/Kimi-K2-Instruct.jinja";
  CHECK(synth::find_preset("kimi-k2").chat_template.find("<|im_assistant|>assistant<|im_middle|>") != std::string::npos);
  CHECK(synth::kimi_k2_chat_template() == sluice::test::read_text(sluice::test::require_file(tmpl)));
  CHECK(synth::kimi_k3_chat_template() == sluice::test::read_text(sluice::test::reference_dir() / "templates/Kimi-K3.jinja"));
  CHECK(synth::qwen3_chat_template() ==
        sluice::test::read_text(sluice::test::reference_dir() / "templates/Qwen-Qwen3-0.6B.jinja"));
}

TEST_CASE("synth --vocab copies another file's tokenizer and takes its vocabulary size") {
  const fs::path vocab = sluice::test::require_file(sluice::test::reference_dir() / "tiny/llama-moe/llama-moe-f16.gguf");
  synth::SynthOptions o;
  o.preset = "tiny-llama-moe";
  o.layers = 1;
  o.quant = "Q8_0";
  o.vocab_path = vocab.string();
  const GgufFile f = parse(synth_file(o, "vocab.gguf"));
  const GgufFile src = parse(vocab);
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_string_array("tokenizer.ggml.tokens") == src.get_string_array("tokenizer.ggml.tokens"));
  CHECK(f.get_float_array("tokenizer.ggml.scores") == src.get_float_array("tokenizer.ggml.scores"));
  CHECK(f.get_uint("tokenizer.ggml.unknown_token_id") == 0);
  CHECK(f.tensor("token_embd.weight").ne[1] == 2048);
  CHECK(f.get_uint("llama.vocab_size") == 2048);
}

TEST_CASE("sluice synth rejects bad flags with clear errors") {
  const fs::path out = sluice::test::temp_dir("synth_cli") / "x.gguf";
  struct Bad { std::string args; std::string message; };
  const Bad bad[] = {
      {"--preset kimi-k9 -o " + out.string(), "unknown preset 'kimi-k9' (known: kimi-k2,"},
      {"--preset kimi-k2 --layers 0 -o " + out.string(), "--layers 0"},
      {"--preset kimi-k2 --layers 62 -o " + out.string(), "kimi-k2 takes 1 to 61 layers"},
      {"--preset kimi-k2 --quant Q9_K -o " + out.string(), "unknown quantization 'Q9_K'"},
      {"--preset kimi-k2 --experts 1 -o " + out.string(), "--experts 1"},
      {"--preset kimi-k2 --experts 385 -o " + out.string(), "takes 2 to 384 routed experts"},
      {"--preset kimi-k2 --skew -1 -o " + out.string(), "--skew"},
      {"--preset kimi-k2 --expert-ff 300 -o " + out.string(), "--expert-ff 300: kimi-k2 takes a multiple of 256"},
      {"--preset kimi-k2 --expert-ff 4096 -o " + out.string(), "up to 2048"},
      {"--preset kimi-k2 --expert-ff 0 -o " + out.string(), "--expert-ff 0: must be at least 256"},
      {"--preset kimi-k2", "-o/--output"},
      {"-o " + out.string(), "--preset is required"},
      {"--preset tiny-qwen3moe --layers 1 --vocab /nonexistent.gguf -o " + out.string(), "/nonexistent.gguf"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.args);
    const auto r = sluice::test::run_sluice("synth " + b.args);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(b.message) != std::string::npos);
    CHECK(r.err.find("\n") == r.err.size() - 1);  // one line
  }
  CHECK_FALSE(fs::exists(out));
  const auto ok =
      sluice::test::run_sluice("synth -q --estimate --preset tiny-llama-moe --layers 1 --quant Q4_0 -o " + out.string());
  CHECK(ok.exit_code == 0);
  CHECK(ok.out.find("wrote") != std::string::npos);
  CHECK(ok.out.find("blk.0   entropy") != std::string::npos);
  CHECK(fs::exists(out));
}

TEST_CASE("synth --quant takes the i-quant and ternary ftypes with llama-quantize's per-tensor types") {
  // The reference files were quantized with one forced --tensor-type each; a forced tensor gets
  // the ftype's own rule here. Random valid blocks are scaled to the init's std.
  for (const char* variant : {"iq1_s", "iq2_xxs", "iq3_xxs", "tq1_0", "iq4_xs"}) {
    CAPTURE(variant);
    const fs::path dir = sluice::test::reference_dir() / "tiny/deepseek2";
    const auto manifest = nlohmann::json::parse(sluice::test::read_text(dir / ("deepseek2-" + std::string(variant) + ".json")));
    const std::string ftype = manifest["quantize"]["ftype"].get<std::string>();
    std::vector<std::string> forced;
    for (const auto& o : manifest["quantize"]["tensor_type_overrides"]) {
      const std::string s = o.get<std::string>();
      forced.push_back(s.substr(0, s.find('=')));
    }
    synth::SynthOptions o;
    o.preset = "tiny-deepseek2";
    o.layers = 3;
    o.quant = ftype;
    const fs::path mine_path = synth_file(o, std::string("ds2-") + variant + ".gguf");
    const GgufFile ref = parse(dir / ("deepseek2-" + std::string(variant) + ".gguf")), mine = parse(mine_path);
    CHECK(mine.get_uint("general.file_type") == ref.get_uint("general.file_type"));
    const GgmlType base = synth::parse_file_type(ftype).base;
    for (const auto& t : ref.tensors()) {
      CAPTURE(t.name);
      const auto* m = mine.find_tensor(t.name);
      REQUIRE(m != nullptr);
      bool is_forced = false;
      for (const auto& f : forced) is_forced = is_forced || t.name.find(f) != std::string::npos;
      if (is_forced) CHECK(m->type == base);
      else CHECK(m->type == t.type);
    }
    const double embd_rms = check_finite(mine, mine_path, "token_embd.weight");
    CHECK(embd_rms == doctest::Approx(1.0).epsilon(0.35));
    // A random-block expert tensor: std 1/sqrt(fan_in) = 1/16.
    const double gate_rms = check_finite(mine, mine_path, "blk.1.ffn_gate_exps.weight");
    CHECK(gate_rms == doctest::Approx(1.0 / 16).epsilon(0.35));
  }
}

TEST_CASE("the split plan follows gguf-split --split-max-size: the reference 4-part set's tensor lists") {
  const fs::path dir = sluice::test::reference_dir() / "tiny/deepseek2";
  const GgufFile whole = parse(dir / "deepseek2-q4_k_m.gguf");
  std::vector<sluice::core::StreamTensor> tensors;
  for (const auto& t : whole.tensors()) {
    sluice::core::StreamTensor s;
    s.name = t.name;
    s.n_bytes = t.n_bytes;
    tensors.push_back(s);
  }
  const auto plan = sluice::core::plan_split(tensors, sluice::core::parse_split_size("2M"));
  const auto j = nlohmann::json::parse(sluice::test::read_text(dir / "split/split.json"))["splits"][1];
  REQUIRE(j["dir"] == "by-size");
  REQUIRE(plan.size() == j["parts"].size());
  for (size_t p = 0; p < plan.size(); ++p) {
    std::vector<std::string> names;
    for (size_t i : plan[p]) names.push_back(tensors[i].name);
    CHECK(names == j["parts"][p]["tensors"].get<std::vector<std::string>>());
  }
  CHECK(sluice::core::parse_split_size("2G") == 2000000000ull);
  CHECK_THROWS_AS(sluice::core::parse_split_size("2X"), Error);
  CHECK_THROWS_AS(sluice::core::parse_split_size("0M"), Error);
}

TEST_CASE("synth --split-max-size writes gguf-split parts that read back as the unsplit model") {
  synth::SynthOptions o;
  o.preset = "tiny-deepseek2";
  o.layers = 3;
  o.quant = "IQ1_S";
  const fs::path whole_path = synth_file(o, "whole.gguf");
  o.out = (sluice::test::temp_dir("synth-split") / "model.gguf").string();
  o.split_max_bytes = sluice::core::parse_split_size("1M");
  const synth::SynthResult r = synth::synthesize(o);
  REQUIRE(r.paths.size() >= 2);
  CHECK(r.paths[0] == sluice::io::split_part_path((fs::path(o.out).parent_path() / "model").string(), 1,
                                                  static_cast<uint32_t>(r.paths.size())));
  uint64_t bytes = 0;
  for (const auto& p : r.paths) bytes += fs::file_size(p);
  CHECK(r.bytes == bytes);

  const GgufFile whole = parse(whole_path);
  sluice::io::PreadReader set_reader(r.paths.back());
  const GgufFile split = GgufFile::parse(set_reader);
  REQUIRE(split.parts().size() == r.paths.size());
  sluice::io::PreadReader whole_reader(whole_path.string());
  REQUIRE(split.tensors().size() == whole.tensors().size());
  for (size_t i = 0; i < whole.tensors().size(); ++i) {
    const auto& a = whole.tensors()[i];
    const auto& b = split.tensors()[i];
    CAPTURE(a.name);
    CHECK(b.name == a.name);
    CHECK(b.type == a.type);
    CHECK(sluice::core::read_tensor_bytes(set_reader, b) == sluice::core::read_tensor_bytes(whole_reader, a));
  }
  // Part 1: every key of the model, then the split keys as gguf-split writes them; later parts:
  // only the split keys. No part's tensor data exceeds the limit unless it holds one tensor.
  for (size_t p = 0; p < r.paths.size(); ++p) {
    sluice::io::PreadOptions po;
    po.whole_split_set = false;
    sluice::io::PreadReader one(r.paths[p], po);
    const GgufFile f = GgufFile::parse_one(one, 0, one.file_size(), r.paths[p]);
    const auto& kv = f.metadata();
    REQUIRE(kv.size() >= 3);
    CHECK(kv[kv.size() - 3].key == "split.no");
    CHECK(kv[kv.size() - 3].value.type == GgufValueType::u16);
    CHECK(kv[kv.size() - 2].key == "split.tensors.count");
    CHECK(kv[kv.size() - 2].value.type == GgufValueType::i32);
    CHECK(kv[kv.size() - 1].key == "split.count");
    CHECK(f.get_uint("split.no") == p);
    CHECK(f.get_uint("split.count") == r.paths.size());
    if (p == 0) CHECK(kv.size() == whole.metadata().size() + 3);
    else CHECK(kv.size() == 3);
    uint64_t data = 0;
    for (const auto& t : f.tensors()) data += (t.n_bytes + 31) / 32 * 32;
    if (f.tensors().size() > 1) CHECK(data <= o.split_max_bytes);
  }
}
