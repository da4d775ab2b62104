// Dequantization must reproduce ggml's to_float bit for bit: SHA-256 of the f32 bytes equals the
// hash llama.cpp's ggml produced for the same tensor.
#include <doctest/doctest.h>

#include <string>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"
#include "tests/kernels_reference.h"

using sluice::Error;
using sluice::ErrorCode;
using sluice::GgmlType;
using namespace sluice::test;

namespace {

// Dequantizes with a specific table (scalar or best) rather than through the public API.
std::vector<float> dequantize_with(const sluice::kernels::cpu::KernelTable& table,
                                   const sluice::core::GgufTensorInfo& t,
                                   const std::vector<std::byte>& bytes) {
  std::vector<float> out(t.n_elements);
  const int64_t n_cols = t.ne[0];
  const auto fn = table.dequantize[size_t(t.type)];
  const bool has_kernel = fn != nullptr;
  REQUIRE(has_kernel);
  for (uint64_t r = 0; r < t.n_elements / uint64_t(n_cols); ++r)
    fn(bytes.data() + r * t.row_bytes, out.data() + r * uint64_t(n_cols), n_cols);
  return out;
}

// Checks every supported `w.<type>` tensor of a kernels*.gguf against its JSON; returns how many.
int check_reference_tensors(const std::string& stem) {
  const auto ref = read_json(kernels_dir() / (stem + ".json"));
  sluice::io::PreadReader reader((kernels_dir() / (stem + ".gguf")).string());
  const auto file = sluice::core::GgufFile::parse(reader);
  int checked = 0;
  for (const auto& [name, entry] : ref["types"].items()) {
    const auto& t = file.tensor(entry["tensor"].get<std::string>());
    if (!sluice::kernels::is_supported(t.type)) continue;
    INFO(stem << " type " << name);
    const auto bytes = read_tensor_bytes(reader, t);
    const auto expected = entry["dequant_sha256_f32le"].get<std::string>();
    const auto values = dequantize_tensor(t, bytes);
    CHECK(values[0] == doctest::Approx(entry["dequant_first8"][0].get<double>()).epsilon(1e-6));
    CHECK(sha256_f32le(values) == expected);
    CHECK(sha256_f32le(dequantize_with(sluice::kernels::cpu::scalar_kernels(), t, bytes)) == expected);
    ++checked;
  }
  return checked;
}

// Checks every tensor of every model named in a tiny/dequant*.json; returns (files, tensors).
std::pair<int, int> check_reference_models(const std::string& json_name) {
  const auto ref = read_json(reference_dir() / "tiny" / json_name);
  int files = 0, tensors = 0;
  for (const auto& [rel, entries] : ref.items()) {
    const auto path = reference_dir() / "tiny" / rel;
    INFO(rel);
    REQUIRE(std::filesystem::exists(path));
    sluice::io::PreadReader reader(path.string());
    const auto file = sluice::core::GgufFile::parse(reader);
    ++files;
    for (const auto& [tensor_name, entry] : entries.items()) {
      INFO(rel << " tensor " << tensor_name);
      const auto& t = file.tensor(tensor_name);
      CHECK(std::string(sluice::ggml_type_name(t.type)) == entry["type"].get<std::string>());
      CHECK(t.n_elements == entry["n"].get<uint64_t>());
      const auto values = dequantize_tensor(t, read_tensor_bytes(reader, t));
      CHECK(sha256_f32le(values) == entry["sha256_f32le"].get<std::string>());
      ++tensors;
    }
  }
  CHECK(files == int(ref.size()));
  return {files, tensors};
}

}  // namespace

TEST_CASE("dequantizing every kernels.gguf weight type reproduces ggml's to_float exactly") {
  // f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K..q6_K mxfp4 iq4_nl, and iq4_xs tq1_0 tq2_0
  CHECK(check_reference_tensors("kernels") == 17);
}

TEST_CASE("dequantizing the imatrix i-quants of kernels-iq.gguf reproduces ggml's to_float exactly") {
  CHECK(check_reference_tensors("kernels-iq") == 7);  // iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s
}

TEST_CASE("every tensor of every shipped reference model dequantizes exactly as ggml does") {
  const auto [files, tensors] = check_reference_models("dequant.json");
  MESSAGE(files << " files, " << tensors << " tensors checked");
}

TEST_CASE("every tensor of the i-quant and ternary reference models dequantizes exactly as ggml does") {
  const auto [files, tensors] = check_reference_models("dequant-iq.json");
  CHECK(files >= 5);  // deepseek2-iq1_s, -iq2_xxs, -iq3_xxs, -iq4_xs, -tq1_0
  MESSAGE(files << " files, " << tensors << " tensors checked");
}

TEST_CASE("a weight type without kernels is rejected with its name and the tensor's") {
  // Every ggml block type has kernels now; the integer and f64 types are what is left.
  for (GgmlType type : {GgmlType::I8, GgmlType::I16, GgmlType::I32, GgmlType::I64, GgmlType::F64}) {
    CHECK_FALSE(sluice::kernels::is_supported(type));
    try {
      sluice::kernels::require_supported(type, "blk.3.ffn_up_exps.weight");
      FAIL("accepted " << sluice::ggml_type_name(type));
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK(std::string(e.what()) == "type " + std::string(sluice::ggml_type_name(type)) +
                                         " not supported yet (tensor 'blk.3.ffn_up_exps.weight')");
    }
  }
  try {
    sluice::kernels::require_supported(GgmlType::I32, "w");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("type i32 not supported yet (tensor 'w')") != std::string::npos);
  }
  std::vector<std::byte> row(1024);
  float out[256];
  CHECK_THROWS_AS(sluice::kernels::dequantize_row(GgmlType::I32, row.data(), out, 256), Error);
  CHECK_THROWS_AS(sluice::kernels::vec_dot_type(GgmlType::I32), Error);
}

TEST_CASE("the i-quants and ternary types are supported, paired with Q8_K, and have no weight quantizer") {
  for (GgmlType type : {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                        GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0}) {
    INFO(sluice::ggml_type_name(type));
    CHECK(sluice::kernels::is_supported(type));
    CHECK_NOTHROW(sluice::kernels::require_supported(type, "w"));
    CHECK(sluice::kernels::vec_dot_type(type) == GgmlType::Q8_K);
    float x[256] = {};
    std::vector<std::byte> row(sluice::ggml_row_bytes(type, 256));
    try {
      sluice::kernels::quantize_row(type, x, row.data(), 256);
      FAIL("quantized " << sluice::ggml_type_name(type));
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK(std::string(e.what()).find("has no quantize kernel") != std::string::npos);
    }
  }
}
