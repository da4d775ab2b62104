// The CUDA dequantizers of the i-quants and ternary types (kernels/cuda/dequant_iquants.cuh,
// dequant_ternary.cuh) run on the CPU here and must reproduce kernels::dequantize_row bit for bit
// (memcmp) on every block of ggml's reference tensors and of the tiny i-quant models, and hash to
// the SHA-256 that ggml's to_float produced. This checks their index math and their reading of the
// codebooks without a GPU. (Compiled by nvcc: the helpers are __host__ __device__.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cuda/dequant_float.cuh"
#include "kernels/cuda/dequant_iquants.cuh"
#include "kernels/cuda/dequant_kquants.cuh"
#include "kernels/cuda/dequant_legacy.cuh"
#include "kernels/cuda/dequant_ternary.cuh"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "tests/kernels_reference.h"

using sluice::GgmlType;
namespace dq = sluice::kernels::cuda::dq;
using namespace sluice::test;

namespace {

const GgmlType kNewTypes[] = {GgmlType::IQ1_S, GgmlType::IQ1_M,   GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                              GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S,   GgmlType::IQ4_XS,
                              GgmlType::TQ1_0, GgmlType::TQ2_0};

// Calls f.template operator()<D>() with the CUDA dequantizer of `type`; false when it has none.
template <class F>
bool with_dequantizer(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::F32: return f.template operator()<dq::F32>(), true;
    case GgmlType::F16: return f.template operator()<dq::F16>(), true;
    case GgmlType::BF16: return f.template operator()<dq::BF16>(), true;
    case GgmlType::Q4_0: return f.template operator()<dq::Q4_0>(), true;
    case GgmlType::Q4_1: return f.template operator()<dq::Q4_1>(), true;
    case GgmlType::Q5_0: return f.template operator()<dq::Q5_0>(), true;
    case GgmlType::Q5_1: return f.template operator()<dq::Q5_1>(), true;
    case GgmlType::Q8_0: return f.template operator()<dq::Q8_0>(), true;
    case GgmlType::MXFP4: return f.template operator()<dq::MXFP4>(), true;
    case GgmlType::IQ4_NL: return f.template operator()<dq::IQ4_NL>(), true;
    case GgmlType::Q2_K: return f.template operator()<dq::Q2_K>(), true;
    case GgmlType::Q3_K: return f.template operator()<dq::Q3_K>(), true;
    case GgmlType::Q4_K: return f.template operator()<dq::Q4_K>(), true;
    case GgmlType::Q5_K: return f.template operator()<dq::Q5_K>(), true;
    case GgmlType::Q6_K: return f.template operator()<dq::Q6_K>(), true;
    case GgmlType::IQ1_S: return f.template operator()<dq::IQ1_S>(), true;
    case GgmlType::IQ1_M: return f.template operator()<dq::IQ1_M>(), true;
    case GgmlType::IQ2_XXS: return f.template operator()<dq::IQ2_XXS>(), true;
    case GgmlType::IQ2_XS: return f.template operator()<dq::IQ2_XS>(), true;
    case GgmlType::IQ2_S: return f.template operator()<dq::IQ2_S>(), true;
    case GgmlType::IQ3_XXS: return f.template operator()<dq::IQ3_XXS>(), true;
    case GgmlType::IQ3_S: return f.template operator()<dq::IQ3_S>(), true;
    case GgmlType::IQ4_XS: return f.template operator()<dq::IQ4_XS>(), true;
    case GgmlType::TQ1_0: return f.template operator()<dq::TQ1_0>(), true;
    case GgmlType::TQ2_0: return f.template operator()<dq::TQ2_0>(), true;
    default: return false;
  }
}

// Rows of n_cols values, row_bytes apart, dequantized by the CUDA helper (every run() of every
// block) and by the CPU layer, compared as bits. Returns the CUDA helper's values, in order;
// counts blocks compared into *blocks. The first few mismatches are reported with their place.
std::vector<float> dequantize_and_compare(GgmlType type, const std::byte* data, int64_t n_rows, int64_t n_cols,
                                          uint64_t row_bytes, int64_t* blocks) {
  INFO("type " << sluice::ggml_type_name(type));
  std::vector<float> values(size_t(n_rows * n_cols));
  const bool has_helper = with_dequantizer(type, [&]<class D>() {
    REQUIRE((sluice::ggml_traits(type).type_size == uint32_t(D::kBytes)));
    REQUIRE((sluice::ggml_traits(type).block_size == uint32_t(D::kQK)));
    REQUIRE(n_cols % D::kQK == 0);
    std::vector<float> ref(static_cast<size_t>(n_cols));
    int mismatches = 0;
    for (int64_t row = 0; row < n_rows; ++row) {
      const auto* r = reinterpret_cast<const uint8_t*>(data) + uint64_t(row) * row_bytes;
      sluice::kernels::dequantize_row(type, data + uint64_t(row) * row_bytes, ref.data(), n_cols);
      float* out = values.data() + row * n_cols;
      for (int64_t b = 0; b < n_cols / D::kQK; ++b)
        for (int j = 0; j < D::kQK / D::kRun; ++j) D::run(r + b * D::kBytes, j, out + b * D::kQK + j * D::kRun);
      for (int64_t i = 0; i < n_cols; ++i)
        if (std::memcmp(&out[i], &ref[size_t(i)], 4) != 0 && ++mismatches <= 5)
          FAIL_CHECK("row " << row << " block " << i / D::kQK << " value " << i % D::kQK << ": " << out[i]
                            << " != " << ref[size_t(i)]);
      *blocks += n_cols / D::kQK;
    }
    CHECK(mismatches == 0);
  });
  REQUIRE(has_helper);
  return values;
}

bool is_new_type(GgmlType type) {
  return std::find(std::begin(kNewTypes), std::end(kNewTypes), type) != std::end(kNewTypes);
}

// Every new-type tensor of kernels/<stem>.gguf against the CPU layer and ggml's hash; returns
// the types checked, sorted.
std::vector<std::string> check_kernels_file(const std::string& stem, int64_t* blocks) {
  const auto ref = read_json(kernels_dir() / (stem + ".json"));
  sluice::io::PreadReader reader((kernels_dir() / (stem + ".gguf")).string());
  const auto file = sluice::core::GgufFile::parse(reader);
  std::vector<std::string> checked;
  for (const auto& [name, entry] : ref["types"].items()) {
    const auto& t = file.tensor(entry["tensor"].get<std::string>());
    if (!is_new_type(t.type)) continue;
    INFO(stem << " type " << name);
    const auto bytes = read_tensor_bytes(reader, t);
    const int64_t n_cols = t.ne[0];
    const auto values = dequantize_and_compare(t.type, bytes.data(), int64_t(t.n_elements) / n_cols, n_cols,
                                               t.row_bytes, blocks);
    CHECK(sha256_f32le(values) == entry["dequant_sha256_f32le"].get<std::string>());
    checked.push_back(name);
  }
  std::sort(checked.begin(), checked.end());
  return checked;
}

}  // namespace

TEST_CASE("cuda dequantizers of the i-quant and ternary types reproduce ggml's kernels.gguf and kernels-iq.gguf tensors bit for bit") {
  int64_t blocks = 0;
  const auto plain = check_kernels_file("kernels", &blocks);
  CHECK(plain == std::vector<std::string>{"iq4_xs", "tq1_0", "tq2_0"});
  const auto imatrix = check_kernels_file("kernels-iq", &blocks);
  CHECK(imatrix == std::vector<std::string>{"iq1_m", "iq1_s", "iq2_s", "iq2_xs", "iq2_xxs", "iq3_s", "iq3_xxs"});
  MESSAGE((plain.size() + imatrix.size()) << " types, " << blocks << " blocks compared");
}

TEST_CASE("cuda dequantizers reproduce every tensor of the i-quant and ternary reference models bit for bit") {
  // tiny/dequant-iq.json: per model file, every tensor with ggml's to_float hash.
  const auto ref = read_json(reference_dir() / "tiny" / "dequant-iq.json");
  std::map<GgmlType, int64_t> blocks_per_type;
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
      const auto bytes = read_tensor_bytes(reader, t);
      const int64_t n_cols = t.ne[0];
      const auto values = dequantize_and_compare(t.type, bytes.data(), int64_t(t.n_elements) / n_cols, n_cols,
                                                 t.row_bytes, &blocks_per_type[t.type]);
      CHECK(sha256_f32le(values) == entry["sha256_f32le"].get<std::string>());
      ++tensors;
    }
  }
  CHECK(files >= 5);  // deepseek2-iq1_s, -iq2_xxs, -iq3_xxs, -iq4_xs, -tq1_0
  int64_t new_blocks = 0;
  for (GgmlType type : kNewTypes) {
    INFO("type " << sluice::ggml_type_name(type));
    CHECK(blocks_per_type[type] > 0);  // every new type occurs in some model
    new_blocks += blocks_per_type[type];
  }
  MESSAGE(files << " files, " << tensors << " tensors; " << new_blocks << " blocks of the new types compared");
}

TEST_CASE("cuda dequantizers of the i-quant and ternary types reproduce the CPU layer bit for bit on random blocks") {
  // Random grid indices, signs and scales reach codebook entries and bit patterns the quantizer
  // never writes.
  constexpr int64_t kBlocks = 512;
  for (GgmlType type : kNewTypes) {
    const int64_t n_cols = kBlocks * 256;
    std::vector<std::byte> row(sluice::ggml_row_bytes(type, uint64_t(n_cols)));
    sluice::kernels::fill_random_blocks(type, n_cols, 4321 + uint32_t(type), row.data());
    int64_t blocks = 0;
    dequantize_and_compare(type, row.data(), 1, n_cols, row.size(), &blocks);
    CHECK(blocks == kBlocks);
  }
}
