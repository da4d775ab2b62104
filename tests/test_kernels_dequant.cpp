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

}  // namespace

TEST_CASE("dequantizing every kernels.gguf weight type reproduces ggml's to_float exactly") {
  const auto ref = read_json(kernels_dir() / "kernels.json");
  sluice::io::PreadReader reader((kernels_dir() / "kernels.gguf").string());
  const auto file = sluice::core::GgufFile::parse(reader);
  int checked = 0;
  for (const auto& [name, entry] : ref["types"].items()) {
    const auto& t = file.tensor(entry["tensor"].get<std::string>());
    if (!sluice::kernels::is_supported(t.type)) continue;
    INFO("type " << name);
    const auto bytes = read_tensor_bytes(reader, t);
    const auto expected = entry["dequant_sha256_f32le"].get<std::string>();
    const auto values = dequantize_tensor(t, bytes);
    CHECK(values[0] == doctest::Approx(entry["dequant_first8"][0].get<double>()).epsilon(1e-6));
    CHECK(sha256_f32le(values) == expected);
    CHECK(sha256_f32le(dequantize_with(sluice::kernels::cpu::scalar_kernels(), t, bytes)) == expected);
    ++checked;
  }
  CHECK(checked >= 14);  // f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K..q6_K mxfp4 iq4_nl
}

TEST_CASE("every tensor of every shipped reference model dequantizes exactly as ggml does") {
  const auto ref = read_json(reference_dir() / "tiny" / "dequant.json");
  int files = 0, tensors = 0;
  for (const auto& [rel, entries] : ref.items()) {
    const auto path = reference_dir() / "tiny" / rel;
    if (!std::filesystem::exists(path)) continue;
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
  MESSAGE(files << " files, " << tensors << " tensors checked");
}

TEST_CASE("a weight type without kernels is rejected with its name and the tensor's") {
  for (GgmlType type :
       {GgmlType::IQ2_XXS, GgmlType::IQ3_S, GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0}) {
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
    sluice::kernels::require_supported(GgmlType::IQ2_XXS, "w");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("type iq2_xxs not supported yet (tensor 'w')") != std::string::npos);
  }
  std::vector<std::byte> block(66);
  float out[256];
  CHECK_THROWS_AS(sluice::kernels::dequantize_row(GgmlType::IQ2_XXS, block.data(), out, 256), Error);
  CHECK_THROWS_AS(sluice::kernels::vec_dot_type(GgmlType::TQ2_0), Error);
}
