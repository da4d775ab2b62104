// Golden tests: every shipped tiny model, teacher-forced, against llama.cpp's logits, greedy
// tokens and routing decisions (../shared/reference/tiny, see its README for the tolerances).
#include <doctest/doctest.h>

#include <filesystem>

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
  double tolerance;  // 0: bit-identical (memcmp)
};

// Loads the model; a file the kernels cannot compute yet (Error(unsupported)) fails the case.
sluice::core::Model load(const Case& c) {
  const auto path = tiny_dir(c.arch) / (std::string(c.arch) + "-" + c.file_variant + ".gguf");
  REQUIRE_MESSAGE(std::filesystem::exists(path), "reference model missing: " << path);
  return sluice::core::Model::load(path.string(), {.widen_f16_to_f32 = c.widen});
}

void check_case(const Case& c) {
  const sluice::core::Model model = load(c);
  const Manifest m = load_manifest(c.arch, c.ref_variant);
  const TeacherForced run = teacher_force(model, m.prompt, m.gen, GgmlType::F32);
  const Comparison cmp = compare(m, run);
  MESSAGE((std::string(c.arch) + "-" + c.ref_variant) << ": max |logit diff| " << cmp.max_diff << " (tolerance " << c.tolerance
                 << "), greedy " << cmp.tokens_equal << "/" << m.gen.size() << ", routing mismatches "
                 << cmp.routing_mismatches << "/" << cmp.routing_records << ", group mismatches "
                 << cmp.group_mismatches << ", max weight diff " << cmp.max_weight_diff);
  CHECK(cmp.routing_mismatches == 0);
  CHECK(cmp.group_mismatches == 0);
  CHECK(cmp.tokens_equal == static_cast<int>(m.gen.size()));
  if (c.tolerance == 0) CHECK(cmp.bit_identical);
  else CHECK(cmp.max_diff <= c.tolerance);
}

}  // namespace

// Tolerances: about twice the max |logit diff| measured against llama.cpp (AVX2 kernels, 1
// thread; see NOTES in the commit that set them), or 0 where the measurement was 0: those runs
// must be bit-identical (memcmp), as README says. The q4_k_m and q2_k bounds were already within
// 2x (measured 0.43 and 0.50) and are kept.
TEST_CASE("deepseek2 in f32 math matches llama.cpp's f32 run") {
  check_case({"deepseek2", "f16", "f32", true, 0});
}
TEST_CASE("deepseek2 f16 matches llama.cpp") { check_case({"deepseek2", "f16", "f16", false, 0}); }
TEST_CASE("deepseek2 q8_0 matches llama.cpp") { check_case({"deepseek2", "q8_0", "q8_0", false, 0}); }
TEST_CASE("deepseek2 q4_k_m matches llama.cpp") { check_case({"deepseek2", "q4_k_m", "q4_k_m", false, 0}); }
TEST_CASE("deepseek2 q2_k matches llama.cpp") { check_case({"deepseek2", "q2_k", "q2_k", false, 0}); }
// The i-quant files: bit-identical since the IQ panel GEMM's order (prompt products of the
// i-quants) and IQ4_NL's three orders (vec_dot, llamafile, repacked); before, 1.1e-5, 0.338,
// 0.360 and 0.207.
TEST_CASE("deepseek2 iq1_s matches llama.cpp") { check_case({"deepseek2", "iq1_s", "iq1_s", false, 0}); }
TEST_CASE("deepseek2 iq2_xxs matches llama.cpp") { check_case({"deepseek2", "iq2_xxs", "iq2_xxs", false, 0}); }
TEST_CASE("deepseek2 iq3_xxs matches llama.cpp") { check_case({"deepseek2", "iq3_xxs", "iq3_xxs", false, 0}); }
TEST_CASE("deepseek2 iq4_xs matches llama.cpp") { check_case({"deepseek2", "iq4_xs", "iq4_xs", false, 0}); }
TEST_CASE("deepseek2 tq1_0 matches llama.cpp") { check_case({"deepseek2", "tq1_0", "tq1_0", false, 0}); }

TEST_CASE("qwen3moe in f32 math is bit-identical to llama.cpp's f32 run") {
  check_case({"qwen3moe", "f16", "f32", true, 0});
}
TEST_CASE("qwen3moe f16 is bit-identical to llama.cpp") { check_case({"qwen3moe", "f16", "f16", false, 0}); }
TEST_CASE("qwen3moe q4_k_m is bit-identical to llama.cpp") { check_case({"qwen3moe", "q4_k_m", "q4_k_m", false, 0}); }

TEST_CASE("llama-moe in f32 math is bit-identical to llama.cpp's f32 run") {
  check_case({"llama-moe", "f16", "f32", true, 0});
}
TEST_CASE("llama-moe f16 is bit-identical to llama.cpp") { check_case({"llama-moe", "f16", "f16", false, 0}); }
TEST_CASE("llama-moe q4_k_m is bit-identical to llama.cpp") { check_case({"llama-moe", "q4_k_m", "q4_k_m", false, 0}); }
