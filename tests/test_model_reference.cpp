// Golden tests: every shipped tiny model, teacher-forced, against llama.cpp's logits, greedy
// tokens and routing decisions (../shared/reference/tiny, see its README for the tolerances).
#include <doctest/doctest.h>

#include <optional>

#include "common/error.h"
#include "tests/model_reference.h"

namespace {

using sluice::GgmlType;
using namespace sluice::test;

struct Case {
  const char* arch;
  const char* file_variant;  // the .gguf
  const char* ref_variant;   // the outputs compared against
  bool widen;
  double tolerance;
};

// Loads the model, or nullopt (with a message) when the kernels cannot compute one of its types yet.
std::optional<sluice::core::Model> load_or_skip(const Case& c) {
  const auto path = tiny_dir(c.arch) / (std::string(c.arch) + "-" + c.file_variant + ".gguf");
  try {
    return sluice::core::Model::load(path.string(), {.widen_f16_to_f32 = c.widen});
  } catch (const sluice::Error& e) {
    if (e.code() != sluice::ErrorCode::unsupported) throw;
    MESSAGE(("skipped " + std::string(c.arch) + "-" + c.ref_variant + ": " + e.what()));
    return std::nullopt;
  }
}

void check_case(const Case& c) {
  auto model = load_or_skip(c);
  if (!model) return;
  const Manifest m = load_manifest(c.arch, c.ref_variant);
  const TeacherForced run = teacher_force(*model, m.prompt, m.gen, GgmlType::F32);
  const Comparison cmp = compare(m, run);
  MESSAGE((std::string(c.arch) + "-" + c.ref_variant) << ": max |logit diff| " << cmp.max_diff << " (tolerance " << c.tolerance
                 << "), greedy " << cmp.tokens_equal << "/" << m.gen.size() << ", routing mismatches "
                 << cmp.routing_mismatches << "/" << cmp.routing_records << ", group mismatches "
                 << cmp.group_mismatches << ", max weight diff " << cmp.max_weight_diff);
  CHECK(cmp.routing_mismatches == 0);
  CHECK(cmp.group_mismatches == 0);
  CHECK(cmp.tokens_equal == static_cast<int>(m.gen.size()));
  CHECK(cmp.max_diff <= c.tolerance);
}

}  // namespace

TEST_CASE("deepseek2 in f32 math matches llama.cpp's f32 run") {
  check_case({"deepseek2", "f16", "f32", true, 1e-3});
}
TEST_CASE("deepseek2 f16 matches llama.cpp") { check_case({"deepseek2", "f16", "f16", false, 0.03}); }
TEST_CASE("deepseek2 q8_0 matches llama.cpp") { check_case({"deepseek2", "q8_0", "q8_0", false, 0.6}); }
TEST_CASE("deepseek2 q4_k_m matches llama.cpp") { check_case({"deepseek2", "q4_k_m", "q4_k_m", false, 0.6}); }
TEST_CASE("deepseek2 q2_k matches llama.cpp") { check_case({"deepseek2", "q2_k", "q2_k", false, 0.6}); }
// The i-quant and ternary files (README "i-quant and ternary variants"); same 0.6 bound.
TEST_CASE("deepseek2 iq1_s matches llama.cpp") { check_case({"deepseek2", "iq1_s", "iq1_s", false, 0.6}); }
TEST_CASE("deepseek2 iq2_xxs matches llama.cpp") { check_case({"deepseek2", "iq2_xxs", "iq2_xxs", false, 0.6}); }
TEST_CASE("deepseek2 iq3_xxs matches llama.cpp") { check_case({"deepseek2", "iq3_xxs", "iq3_xxs", false, 0.6}); }
TEST_CASE("deepseek2 tq1_0 matches llama.cpp") { check_case({"deepseek2", "tq1_0", "tq1_0", false, 0.6}); }
TEST_CASE("deepseek2 iq4_xs matches llama.cpp") { check_case({"deepseek2", "iq4_xs", "iq4_xs", false, 0.6}); }

TEST_CASE("qwen3moe in f32 math matches llama.cpp's f32 run") {
  check_case({"qwen3moe", "f16", "f32", true, 1e-3});
}
TEST_CASE("qwen3moe f16 matches llama.cpp") { check_case({"qwen3moe", "f16", "f16", false, 1e-3}); }
TEST_CASE("qwen3moe q4_k_m matches llama.cpp") { check_case({"qwen3moe", "q4_k_m", "q4_k_m", false, 0.05}); }

TEST_CASE("llama-moe in f32 math matches llama.cpp's f32 run") {
  check_case({"llama-moe", "f16", "f32", true, 1e-3});
}
TEST_CASE("llama-moe f16 matches llama.cpp") { check_case({"llama-moe", "f16", "f16", false, 1e-3}); }
TEST_CASE("llama-moe q4_k_m matches llama.cpp") { check_case({"llama-moe", "q4_k_m", "q4_k_m", false, 0.05}); }
