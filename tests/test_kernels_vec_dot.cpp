// Dot products and activation quantization: agreement with ggml's CPU backend on the reference
// vectors, SIMD against the scalar reference on random rows, and the reference quantizers'
// error against ggml's own.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <map>
#include <cstring>
#include <string>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "tests/float_compare.h"
#include "tests/kernels_reference.h"

using sluice::GgmlType;
using sluice::kernels::cpu::KernelTable;
using namespace sluice::test;

namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,   GgmlType::BF16,  GgmlType::Q4_0,
                                 GgmlType::Q4_1, GgmlType::Q5_0,  GgmlType::Q5_1,  GgmlType::Q8_0,
                                 GgmlType::Q2_K, GgmlType::Q3_K,  GgmlType::Q4_K,  GgmlType::Q5_K,
                                 GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::IQ4_NL};

std::vector<std::byte> quantize_with(const KernelTable& table, GgmlType type, const std::vector<float>& x) {
  std::vector<std::byte> out(sluice::ggml_row_bytes(type, x.size()));
  table.quantize[size_t(type)](x.data(), out.data(), int64_t(x.size()));
  return out;
}

const KernelTable& scalar() { return sluice::kernels::cpu::scalar_kernels(); }
const KernelTable& best() { return sluice::kernels::cpu::best_kernels(); }

// The i-quants and ternary types: dequantize and dot only (no weight quantizer), so the SIMD
// checks run them on random blocks.
const GgmlType kIqTypes[] = {GgmlType::IQ1_S,   GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                             GgmlType::IQ2_S,   GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ4_XS,
                             GgmlType::TQ1_0,   GgmlType::TQ2_0};

// A row of random bytes with every f16 scale field replaced by a small finite value, so that
// every bit pattern of the packed quants and sub-block scales is exercised.
std::vector<std::byte> random_blocks(GgmlType type, int64_t n, uint32_t seed) {
  std::vector<std::byte> bytes(sluice::ggml_row_bytes(type, uint64_t(n)));
  sluice::kernels::fill_random_blocks(type, n, seed, bytes.data());
  return bytes;
}

// vec_dot of every row of every supported `w.<type>` in a kernels*.gguf against ggml's CPU result
// (the first of each `dots` pair), with both tables; returns the types checked. `max_rel` gets
// each type's largest relative error (name -> error), for the report.
int check_reference_dots(const std::string& stem, std::map<std::string, RunningMax>* max_rel = nullptr) {
  const auto ref = read_json(kernels_dir() / (stem + ".json"));
  sluice::io::PreadReader reader((kernels_dir() / (stem + ".gguf")).string());
  const auto file = sluice::core::GgufFile::parse(reader);
  const auto& act_info = file.tensor("activation");
  std::vector<float> activation(act_info.n_elements);
  reader.read_sync(act_info.file_offset, std::as_writable_bytes(std::span(activation)));
  int checked = 0;
  for (const auto& [name, entry] : ref["types"].items()) {
    const auto& t = file.tensor(entry["tensor"].get<std::string>());
    if (!sluice::kernels::is_supported(t.type)) continue;
    const GgmlType act_type = sluice::kernels::vec_dot_type(t.type);
    CHECK(std::string(sluice::ggml_type_name(act_type)) == entry["vec_dot_type"].get<std::string>());
    CHECK(t.row_bytes == entry["row_bytes"].get<uint64_t>());
    const auto bytes = read_tensor_bytes(reader, t);
    for (const KernelTable* table : {&scalar(), &best()}) {
      const auto act = quantize_with(*table, act_type, activation);
      for (size_t r = 0; r < entry["dots"].size(); ++r) {
        INFO(stem << " type " << name << " row " << r << " isa " << table->isa);
        const double expected = entry["dots"][r][0].get<double>();
        const float got = table->vec_dot[size_t(t.type)](bytes.data() + r * t.row_bytes, act.data(), t.ne[0]);
        const double rel = std::fabs(got - expected) / std::fabs(expected);
        if (max_rel) (*max_rel)[name].add(rel);
        CHECK(rel <= 1e-5);
      }
    }
    ++checked;
  }
  return checked;
}


}  // namespace

TEST_CASE("vec_dot of every reference row matches ggml's CPU result within 1e-5 relative") {
  CHECK(check_reference_dots("kernels") == 17);
}

TEST_CASE("vec_dot of the imatrix i-quant reference rows matches ggml's CPU result within 1e-5 relative") {
  std::map<std::string, RunningMax> max_rel;
  CHECK(check_reference_dots("kernels-iq", &max_rel) == 7);
  check_reference_dots("kernels", &max_rel);
  for (const auto& [name, rel] : max_rel) MESSAGE(name << ": max relative error " << rel.value());
}

// llama.cpp's logits on k-quant models depend on the last bit of every dot: the AVX2 kernels of the
// types the reference models use through vec_dot (not repacked on x86) sum as ggml's AVX2 code does.
TEST_CASE("AVX2 and AVX-512 Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K dots equal ggml's CPU vec_dot to the bit") {
  if (sluice::kernels::cpu::kernel_levels().size() < 2) {
    MESSAGE("skipped: no AVX2 on this CPU");
    return;
  }
  const auto ref = read_json(kernels_dir() / "kernels.json");
  sluice::io::PreadReader reader((kernels_dir() / "kernels.gguf").string());
  const auto file = sluice::core::GgufFile::parse(reader);
  const auto& act_info = file.tensor("activation");
  std::vector<float> activation(act_info.n_elements);
  reader.read_sync(act_info.file_offset, std::as_writable_bytes(std::span(activation)));
  // MXFP4 is not there yet (within 1e-5, not bit-exact).
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"}) {
    const auto& entry = ref["types"][name];
    const auto& t = file.tensor(entry["tensor"].get<std::string>());
    const auto bytes = read_tensor_bytes(reader, t);
    for (const KernelTable* k : sluice::kernels::cpu::kernel_levels()) {
      if (k == &scalar()) continue;
      const auto act = quantize_with(*k, sluice::kernels::vec_dot_type(t.type), activation);
      for (size_t r = 0; r < entry["dots"].size(); ++r) {
        INFO("type " << std::string(name) << " row " << r << " isa " << std::string(k->isa));
        const float expected = entry["dots"][r][0].get<float>();
        CHECK(k->vec_dot[size_t(t.type)](bytes.data() + r * t.row_bytes, act.data(), t.ne[0]) == expected);
      }
    }
  }
}

// The i-quant and ternary kernels (scalar and AVX2 alike) sum in ggml's x86 order: every
// reference row lands on ggml's CPU result to the last bit.
TEST_CASE("i-quant and ternary dots equal ggml's CPU vec_dot to the bit, scalar and AVX2") {
  for (const std::string stem : {"kernels", "kernels-iq"}) {
    const auto ref = read_json(kernels_dir() / (stem + ".json"));
    sluice::io::PreadReader reader((kernels_dir() / (stem + ".gguf")).string());
    const auto file = sluice::core::GgufFile::parse(reader);
    const auto& act_info = file.tensor("activation");
    std::vector<float> activation(act_info.n_elements);
    reader.read_sync(act_info.file_offset, std::as_writable_bytes(std::span(activation)));
    int checked = 0;
    for (const auto& [name, entry] : ref["types"].items()) {
      const auto& t = file.tensor(entry["tensor"].get<std::string>());
      if (std::find(std::begin(kIqTypes), std::end(kIqTypes), t.type) == std::end(kIqTypes)) continue;
      const auto bytes = read_tensor_bytes(reader, t);
      for (const KernelTable* table : {&scalar(), &best()}) {
        const auto act = quantize_with(*table, GgmlType::Q8_K, activation);
        for (size_t r = 0; r < entry["dots"].size(); ++r) {
          INFO("type " << name << " row " << r << " isa " << table->isa);
          const float expected = entry["dots"][r][0].get<float>();
          CHECK(table->vec_dot[size_t(t.type)](bytes.data() + r * t.row_bytes, act.data(), t.ne[0]) == expected);
        }
      }
      ++checked;
    }
    CHECK(checked == (stem == "kernels" ? 3 : 7));
  }
}

TEST_CASE("SIMD activation quantization is bit-identical to the scalar reference") {
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t n : {256, 512, 4096, 7168, 18432}) {
      for (uint32_t seed : {1u, 2u, 3u}) {
        INFO(sluice::ggml_type_name(type) << " n=" << n << " seed=" << seed << " isa " << std::string(best().isa));
        auto x = random_row(n, seed * 7919u + uint32_t(n));
        // Values exactly halfway between two quantization levels exercise the tie rule.
        if (n == 256) {
          for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16) + 0.5f;
          x[31] = 127.0f;
          for (int j = 32; j < 64; ++j) x[size_t(j)] = 0.0f;  // an all-zero block: d = 0, qs = 0
          x[100] = -1e-30f;                                   // subnormal f16 territory
        }
        CHECK(quantize_with(best(), type, x) == quantize_with(scalar(), type, x));
      }
    }
  }
}

TEST_CASE("SIMD F16 dequantization is bit-identical to the scalar reference") {
  const auto x = random_row(1003, 77);
  const auto h = quantize_with(scalar(), GgmlType::F16, x);
  std::vector<float> a(x.size()), b(x.size());
  best().dequantize[size_t(GgmlType::F16)](h.data(), a.data(), int64_t(x.size()));
  scalar().dequantize[size_t(GgmlType::F16)](h.data(), b.data(), int64_t(x.size()));
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("SIMD dot products match the scalar reference within normalized MSE 1e-10") {
  for (GgmlType type : kWeightTypes) {
    const GgmlType act_type = sluice::kernels::vec_dot_type(type);
    double err = 0, norm = 0;
    for (int64_t n : {256, 1024, 4096, 7168, 18432}) {
      for (uint32_t seed : {11u, 12u}) {
        const auto w = quantize_with(scalar(), type, random_row(n, seed, 0.05f));
        const auto act = quantize_with(scalar(), act_type, random_row(n, seed + 100));
        const double a = best().vec_dot[size_t(type)](w.data(), act.data(), n);
        const double b = scalar().vec_dot[size_t(type)](w.data(), act.data(), n);
        err += (a - b) * (a - b);
        norm += b * b;
      }
    }
    INFO(sluice::ggml_type_name(type) << " isa " << best().isa << " nmse " << err / norm);
    CHECK(norm > 0);
    CHECK(err / norm <= 1e-10);
  }
}

TEST_CASE("SIMD dot products match the scalar reference on random bit patterns of every block field") {
  std::vector<GgmlType> types(std::begin(kWeightTypes), std::end(kWeightTypes));
  types.insert(types.end(), std::begin(kIqTypes), std::end(kIqTypes));
  for (GgmlType type : types) {
    if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) continue;
    const GgmlType act_type = sluice::kernels::vec_dot_type(type);
    double err = 0, norm = 0;
    for (int64_t n : {256, 2048, 18432}) {
      const auto w = random_blocks(type, n, uint32_t(n) + 5);
      const auto act = quantize_with(scalar(), act_type, random_row(n, uint32_t(n) + 6));
      const double a = best().vec_dot[size_t(type)](w.data(), act.data(), n);
      const double b = scalar().vec_dot[size_t(type)](w.data(), act.data(), n);
      err += (a - b) * (a - b);
      norm += b * b;
    }
    INFO(sluice::ggml_type_name(type) << " nmse " << err / norm);
    CHECK(err / norm <= 1e-10);
  }
}

// Scalar and AVX2 i-quant/ternary kernels sum in the same order (ggml's x86 one), so they agree
// to the bit on any block, not only within a tolerance.
TEST_CASE("AVX2 i-quant and ternary dots are bit-identical to the scalar reference on random blocks") {
  for (GgmlType type : kIqTypes) {
    for (int64_t n : {256, 2048, 18432}) {
      for (uint32_t seed : {1u, 2u}) {
        INFO(sluice::ggml_type_name(type) << " n=" << n << " seed=" << seed << " isa " << std::string(best().isa));
        const auto w = random_blocks(type, n, seed * 31u + uint32_t(n));
        const auto act = quantize_with(scalar(), GgmlType::Q8_K, random_row(n, seed + uint32_t(n), seed == 2 ? 30.0f : 1.0f));
        const float a = best().vec_dot[size_t(type)](w.data(), act.data(), n);
        const float b = scalar().vec_dot[size_t(type)](w.data(), act.data(), n);
        CHECK(std::isfinite(b));
        CHECK(std::memcmp(&a, &b, sizeof a) == 0);
      }
    }
  }
}

TEST_CASE("the reference quantizers reproduce constant and all-zero rows") {
  for (GgmlType type : kWeightTypes) {
    for (float value : {0.0f, 0.25f, -3.0f}) {
      INFO(sluice::ggml_type_name(type) << " value " << value);
      const std::vector<float> x(512, value);
      const auto q = quantize_with(scalar(), type, x);
      std::vector<float> back(x.size());
      scalar().dequantize[size_t(type)](q.data(), back.data(), int64_t(x.size()));
      // Within the coarsest format's step: Q2_K keeps 2 bits and 4-bit sub-block scales.
      CHECK(rms(back, x) <= 0.05 * std::fabs(value) + 1e-6);
    }
  }
}

TEST_CASE("the dispatch table uses AVX2 kernels on a CPU that has AVX2, FMA and F16C, AVX-512 ones with AVX-512 VNNI") {
  __builtin_cpu_init();
  const bool has_avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vnni");
  if (std::getenv("SLUICE_KERNELS") == nullptr)
    CHECK(std::string(best().isa) == (has_avx512 ? "avx512_vnni" : has_avx2 ? "avx2" : "scalar"));
  CHECK(std::string(scalar().isa) == "scalar");
}

TEST_CASE("the reference quantizers lose at most 1.25x the RMS error of ggml's own quantization") {
  const auto ref = read_json(kernels_dir() / "kernels.json");
  sluice::io::PreadReader reader((kernels_dir() / "kernels.gguf").string());
  const auto file = sluice::core::GgufFile::parse(reader);
  const auto& src_info = file.tensor("source");
  std::vector<float> source(src_info.n_elements);
  reader.read_sync(src_info.file_offset, std::as_writable_bytes(std::span(source)));
  for (const auto& [name, entry] : ref["types"].items()) {
    const auto& t = file.tensor(entry["tensor"].get<std::string>());
    if (!sluice::kernels::is_supported(t.type)) continue;
    // No weight quantizer for the i-quants and ternary types (ggml's needs its codebook search).
    if (std::find(std::begin(kIqTypes), std::end(kIqTypes), t.type) != std::end(kIqTypes)) {
      CHECK_FALSE(sluice::kernels::has_weight_quantizer(t.type));
      continue;
    }
    REQUIRE(t.n_elements == source.size());
    const auto ggml_values = dequantize_tensor(t, read_tensor_bytes(reader, t));
    std::vector<std::byte> ours(t.n_bytes);
    for (uint64_t r = 0; r < t.n_elements / uint64_t(t.ne[0]); ++r)
      sluice::kernels::quantize_row(t.type, source.data() + r * uint64_t(t.ne[0]),
                                    ours.data() + r * t.row_bytes, t.ne[0]);
    const auto our_values = dequantize_tensor(t, ours);
    const double ours_rms = rms(our_values, source), ggml_rms = rms(ggml_values, source);
    INFO("type " << name << ": ours " << ours_rms << " ggml " << ggml_rms);
    CHECK(ours_rms <= 1.25 * ggml_rms);
  }
}
