// Every kernel level the CPU runs (scalar, avx2, avx512_vnni) gives the same dot products, bit for
// bit, for every type and every multi-row width: on random blocks and on the ggml reference rows.
//
// "The same" has two references. The scalar table is ggml's generic order; the AVX2 table follows
// ggml's x86 order, which llama.cpp's logits depend on, and for some types that order rounds
// differently from the generic one (it sums in 8 float lanes). So every level above avx2 must equal
// the avx2 table to the bit for every type, and every SIMD level must equal the scalar table to the
// bit for the types whose scalar code is written in the x86 order (kScalarIsX86Order); the others
// are held to normalized MSE 1e-10 against scalar, as test_kernels_vec_dot does.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "tests/cpu_flags.h"
#include "tests/kernels_reference.h"

using sluice::GgmlType;
using sluice::kernels::cpu::KernelTable;
using sluice::kernels::cpu::VecDotFn;
using sluice::kernels::cpu::VecDotMultiFn;
using namespace sluice::test;

namespace {

const GgmlType kDotTypes[] = {
    GgmlType::F32,    GgmlType::F16,   GgmlType::BF16,    GgmlType::Q4_0,   GgmlType::Q4_1,    GgmlType::Q5_0,
    GgmlType::Q5_1,   GgmlType::Q8_0,  GgmlType::MXFP4,   GgmlType::IQ4_NL, GgmlType::Q2_K,    GgmlType::Q3_K,
    GgmlType::Q4_K,   GgmlType::Q5_K,  GgmlType::Q6_K,    GgmlType::TQ1_0,  GgmlType::TQ2_0,   GgmlType::IQ4_XS,
    GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
    GgmlType::IQ1_M};

// Types whose scalar vec_dot sums in ggml's x86 order, so every SIMD level equals it to the bit.
const GgmlType kScalarIsX86Order[] = {GgmlType::IQ4_NL, GgmlType::TQ1_0,  GgmlType::TQ2_0,   GgmlType::IQ4_XS, GgmlType::IQ2_XXS,
                                      GgmlType::IQ2_XS, GgmlType::IQ2_S,   GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                                      GgmlType::IQ1_S,  GgmlType::IQ1_M};

bool scalar_is_x86_order(GgmlType type) {
  return std::find(std::begin(kScalarIsX86Order), std::end(kScalarIsX86Order), type) != std::end(kScalarIsX86Order);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

const KernelTable* level(const char* isa) {
  for (const KernelTable* t : sluice::kernels::cpu::kernel_levels())
    if (std::string(t->isa) == isa) return t;
  return nullptr;
}

// A weight row: random blocks (every bit pattern) for block types, quantized random values for
// the float types.
std::vector<std::byte> weight_row(GgmlType type, int64_t n, uint32_t seed) {
  std::vector<std::byte> bytes(sluice::ggml_row_bytes(type, uint64_t(n)));
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    const auto x = random_row(n, seed, 0.05f);
    sluice::kernels::quantize_row(type, x.data(), bytes.data(), n);
  } else {
    sluice::kernels::fill_random_blocks(type, n, seed, bytes.data());
  }
  return bytes;
}

// One dot order of a table: the one-row function and its multi-row widths.
struct Order {
  const char* name;
  VecDotFn one;
  const VecDotMultiFn* multi;
};

std::vector<Order> orders_of(const KernelTable& k, GgmlType type) {
  const size_t ti = size_t(type);
  const Order all[] = {{"vec_dot", k.vec_dot[ti], k.vec_dot_multi[ti]},
                       {"repack GEMV", k.vec_dot_repack[ti], k.vec_dot_repack_multi[ti]},
                       {"repack GEMM", k.vec_dot_repack_gemm[ti], k.vec_dot_repack_gemm_multi[ti]},
                       {"IQ panel", k.vec_dot_panel[ti], k.vec_dot_panel_multi[ti]},
                       {"llamafile", k.vec_dot_llamafile[ti], k.vec_dot_llamafile_multi[ti]}};
  std::vector<Order> o;
  for (const Order& x : all)
    if (x.one != nullptr) o.push_back(x);
  return o;
}

// out[t] for every width of `o` (1 for the one-row function, then 2, 4, 8 where present) equals
// expected[t] to the bit; returns the widths checked.
int check_widths(const Order& o, const std::byte* w, const std::vector<std::byte>& act, size_t act_row, int64_t n,
                 const std::vector<float>& expected) {
  int widths = 0;
  for (int t = 0; t < 8; ++t) {
    INFO(o.name << " one-row, activation row " << t);
    CHECK(same_bits(o.one(w, act.data() + size_t(t) * act_row, n), expected[size_t(t)]));
  }
  ++widths;
  for (int m = 0; m < 3; ++m) {
    if (o.multi[m] == nullptr) continue;
    const int rows = KernelTable::kMultiWidths[m];
    float out[8] = {};
    o.multi[m](w, act.data(), act_row, n, out);
    for (int t = 0; t < rows; ++t) {
      INFO(o.name << " x" << rows << ", activation row " << t);
      CHECK(same_bits(out[t], expected[size_t(t)]));
    }
    ++widths;
  }
  return widths;
}

}  // namespace

TEST_CASE("the kernel levels this CPU runs are listed, and the AVX-512 VNNI level exists where the CPU has it") {
  const auto levels = sluice::kernels::cpu::kernel_levels();
  REQUIRE(!levels.empty());
  CHECK(std::string(levels[0]->isa) == "scalar");
  std::string names;
  for (const KernelTable* t : levels) names += std::string(" ") + t->isa;
  MESSAGE("kernel levels on this CPU:" << names);
  const bool avx2 = cpu_has_avx2_level();
  const bool avx512 = cpu_has_avx512_vnni_level();
  CHECK((level("avx2") != nullptr) == avx2);
  CHECK((level("avx512_vnni") != nullptr) == avx512);
  if (!avx2) MESSAGE("level avx2 not tested: this CPU lacks AVX2/FMA/F16C");
  if (!avx512) MESSAGE("level avx512_vnni not tested: this CPU lacks AVX-512 F/BW/VL/DQ + VNNI");
  // Without SLUICE_KERNELS, best_kernels() is the highest level.
  if (std::getenv("SLUICE_KERNELS") == nullptr) CHECK(&sluice::kernels::cpu::best_kernels() == levels.back());
}

TEST_CASE("SLUICE_KERNELS picks a level, capped to the CPU's, and rejects an unknown value") {
  using sluice::kernels::cpu::kernels_for_env;
  const auto levels = sluice::kernels::cpu::kernel_levels();
  CHECK(&kernels_for_env(nullptr) == levels.back());
  CHECK(&kernels_for_env("") == levels.back());
  CHECK(std::string(kernels_for_env("scalar").isa) == "scalar");
  CHECK(std::string(kernels_for_env("avx2").isa) == levels[std::min<size_t>(1, levels.size() - 1)]->isa);
  CHECK(&kernels_for_env("avx512") == levels.back());
  try {
    kernels_for_env("avx1024");
    FAIL("no error for SLUICE_KERNELS=avx1024");
  } catch (const sluice::Error& e) {
    CHECK(e.code() == sluice::ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("SLUICE_KERNELS='avx1024'") != std::string::npos);
    CHECK(std::string(e.what()).find("scalar, avx2 or avx512") != std::string::npos);
  }
}

TEST_CASE("every kernel level's dots, one-row and multi-row, equal the reference level's to the bit on random blocks") {
  const KernelTable& scalar = sluice::kernels::cpu::scalar_kernels();
  const KernelTable* avx2 = level("avx2");
  int levels_checked = 0;
  for (const KernelTable* k : sluice::kernels::cpu::kernel_levels()) {
    if (k == &scalar) continue;
    int widths = 0;
    for (GgmlType type : kDotTypes) {
      const GgmlType act_type = sluice::kernels::vec_dot_type(type);
      for (int64_t n : {256, 1024, 4096}) {
        const size_t act_row = sluice::ggml_row_bytes(act_type, uint64_t(n));
        std::vector<std::byte> act(act_row * 8);
        for (int t = 0; t < 8; ++t) {
          // One row of large values (saturation, -128 after rounding) among ordinary ones.
          const auto xr = random_row(n, 300 + uint32_t(t) + uint32_t(n), t == 5 ? 40.0f : 1.0f);
          scalar.quantize[size_t(act_type)](xr.data(), act.data() + size_t(t) * act_row, n);
        }
        for (uint32_t seed : {1u, 2u}) {
          const auto w = weight_row(type, n, seed * 1000u + uint32_t(type) + uint32_t(n));
          for (const Order& o : orders_of(*k, type)) {
            // The reference order: avx2's for every level above it, scalar's where it is the x86
            // order (or for the avx2 level itself, which is checked against scalar by NMSE). The
            // other orders (repacked, IQ panel, llamafile) are written in llama.cpp's order at
            // every level.
            const bool x86_scalar = scalar_is_x86_order(type) || std::string(o.name) != "vec_dot";
            VecDotFn ref = nullptr;
            for (const Order& r : orders_of(k == avx2 || x86_scalar ? scalar : *avx2, type))
              if (std::string(r.name) == o.name) ref = r.one;
            REQUIRE((ref != nullptr));
            std::vector<float> expected(8);
            for (int t = 0; t < 8; ++t) expected[size_t(t)] = ref(w.data(), act.data() + size_t(t) * act_row, n);
            INFO("level " << std::string(k->isa) << " type " << sluice::ggml_type_name(type) << " n=" << n << " seed " << seed);
            if (k == avx2 && !x86_scalar) {
              // avx2 against scalar: ggml's x86 order, close but not equal (test_kernels_vec_dot
              // holds it to normalized MSE 1e-10). Here its widths against its own one-row result.
              for (int t = 0; t < 8; ++t) expected[size_t(t)] = o.one(w.data(), act.data() + size_t(t) * act_row, n);
            }
            widths += check_widths(o, w.data(), act, act_row, n, expected);
          }
        }
      }
    }
    MESSAGE("level " << std::string(k->isa) << ": " << widths << " (type, order, size, width) combinations equal to the bit");
    CHECK(widths > 0);
    ++levels_checked;
  }
  if (levels_checked == 0) MESSAGE("this CPU runs only the scalar level: no SIMD level to compare");
}

TEST_CASE("every kernel level's dots equal the reference level's to the bit on the recorded ggml vectors") {
  const KernelTable& scalar = sluice::kernels::cpu::scalar_kernels();
  const KernelTable* avx2 = level("avx2");
  for (const std::string stem : {"kernels", "kernels-iq"}) {
    const auto ref = read_json(kernels_dir() / (stem + ".json"));
    sluice::io::PreadReader reader((kernels_dir() / (stem + ".gguf")).string());
    const auto file = sluice::core::GgufFile::parse(reader);
    const auto& act_info = file.tensor("activation");
    std::vector<float> activation(act_info.n_elements);
    reader.read_sync(act_info.file_offset, std::as_writable_bytes(std::span(activation)));
    for (const auto& [name, entry] : ref["types"].items()) {
      const auto& info = file.tensor(entry["tensor"].get<std::string>());
      if (!sluice::kernels::is_supported(info.type)) continue;
      const GgmlType act_type = sluice::kernels::vec_dot_type(info.type);
      const size_t act_row = sluice::ggml_row_bytes(act_type, uint64_t(info.ne[0]));
      // The same quantized activation in all 8 rows: every width sees the recorded row.
      std::vector<std::byte> act(act_row * 8);
      for (int t = 0; t < 8; ++t)
        scalar.quantize[size_t(act_type)](activation.data(), act.data() + size_t(t) * act_row, info.ne[0]);
      const auto bytes = read_tensor_bytes(reader, info);
      for (const KernelTable* k : sluice::kernels::cpu::kernel_levels()) {
        if (k == &scalar || k == avx2) continue;  // avx2 is the reference (test_kernels_vec_dot checks it)
        const KernelTable& reference = scalar_is_x86_order(info.type) ? scalar : *avx2;
        for (const Order& o : orders_of(*k, info.type)) {
          VecDotFn rf = nullptr;
          for (const Order& r : orders_of(reference, info.type))
            if (std::string(r.name) == o.name) rf = r.one;
          REQUIRE((rf != nullptr));
          for (size_t r = 0; r < entry["dots"].size(); ++r) {
            INFO(stem << " type " << name << " row " << r << " level " << std::string(k->isa));
            const std::byte* w = bytes.data() + r * info.row_bytes;
            const std::vector<float> expected(8, rf(w, act.data(), info.ne[0]));
            check_widths(o, w, act, act_row, info.ne[0], expected);
            // And ggml's recorded vec_dot, within the tolerance test_kernels_vec_dot holds.
            if (std::string(o.name) != "vec_dot") continue;
            const double e = entry["dots"][r][0].get<double>();
            CHECK(std::fabs(o.one(w, act.data(), info.ne[0]) - e) <= 1e-5 * std::fabs(e));
          }
        }
      }
    }
  }
}

TEST_CASE("dot_f16_rows gives each level's vec_dot[F16] bit for bit, for every head count and row length") {
  // Row lengths: 32-value steps only, an 8-value step, a scalar tail, MLA's 576, and one past the
  // kernels' widened-q buffer (the per-head fallback); head counts around the 2- and 4-head passes.
  for (const KernelTable* t : sluice::kernels::cpu::kernel_levels()) {
    INFO("kernel level " << t->isa);
    REQUIRE(bool(t->dot_f16_rows));
    for (const int64_t n : {int64_t(64), int64_t(40), int64_t(45), int64_t(576), int64_t(1040)}) {
      constexpr int64_t n_rows = 37;
      const size_t stride = size_t(n + 8) * 2;  // a row stride wider than the row
      std::vector<std::byte> rows(stride * n_rows);
      std::vector<float> src(static_cast<size_t>(n));
      for (int64_t j = 0; j < n_rows; ++j) {
        for (int64_t i = 0; i < n; ++i) src[size_t(i)] = std::sin(0.37f * float(i + 13 * j)) * 2.5f;
        sluice::kernels::quantize_row(GgmlType::F16, src.data(), rows.data() + size_t(j) * stride, n);
      }
      for (int n_q = 1; n_q <= 9; ++n_q) {
        std::vector<std::vector<std::byte>> q(static_cast<size_t>(n_q), std::vector<std::byte>(static_cast<size_t>(n) * 2));
        std::vector<const uint16_t*> q_ptrs;
        std::vector<std::vector<float>> got(static_cast<size_t>(n_q), std::vector<float>(n_rows));
        std::vector<float*> out_ptrs;
        for (int h = 0; h < n_q; ++h) {
          for (int64_t i = 0; i < n; ++i) src[size_t(i)] = std::cos(0.11f * float(i * (h + 1))) / float(h + 1);
          sluice::kernels::quantize_row(GgmlType::F16, src.data(), q[size_t(h)].data(), n);
          q_ptrs.push_back(reinterpret_cast<const uint16_t*>(q[size_t(h)].data()));
          out_ptrs.push_back(got[size_t(h)].data());
        }
        t->dot_f16_rows(rows.data(), stride, n_rows, n, q_ptrs.data(), n_q, out_ptrs.data());
        int differ = 0;
        for (int h = 0; h < n_q; ++h)
          for (int64_t j = 0; j < n_rows; ++j)
            differ += !same_bits(got[size_t(h)][size_t(j)],
                                 t->vec_dot[size_t(GgmlType::F16)](rows.data() + size_t(j) * stride, q[size_t(h)].data(), n));
        INFO("n " << n << ", heads " << n_q);
        CHECK(differ == 0);
      }
    }
  }
}
