// Fills the scalar table and, once, the best table for the running CPU.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include "kernels/cpu/dispatch.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/ggml_type.h"
#include "kernels/cpu/scalar.h"
#include "kernels/cpu/scalar_iq.h"

namespace sluice::kernels::cpu {
namespace {

void set(KernelTable& t, GgmlType type, DequantizeFn dq, QuantizeFn q, VecDotFn dot) {
  const auto i = static_cast<size_t>(type);
  t.dequantize[i] = dq;
  t.quantize[i] = q;
  t.vec_dot[i] = dot;
}

KernelTable make_scalar_table() {
  KernelTable t;
  t.isa = "scalar";
  set(t, GgmlType::F32, dequantize_f32, quantize_f32, vec_dot_f32);
  set(t, GgmlType::F16, dequantize_f16, quantize_f16, vec_dot_f16);
  set(t, GgmlType::BF16, dequantize_bf16, quantize_bf16, vec_dot_bf16);
  set(t, GgmlType::Q4_0, dequantize_q4_0, quantize_q4_0, vec_dot_q4_0);
  set(t, GgmlType::Q4_1, dequantize_q4_1, quantize_q4_1, vec_dot_q4_1);
  set(t, GgmlType::Q5_0, dequantize_q5_0, quantize_q5_0, vec_dot_q5_0);
  set(t, GgmlType::Q5_1, dequantize_q5_1, quantize_q5_1, vec_dot_q5_1);
  set(t, GgmlType::Q8_0, dequantize_q8_0, quantize_q8_0, vec_dot_q8_0);
  set(t, GgmlType::Q8_1, dequantize_q8_1, quantize_q8_1, nullptr);
  set(t, GgmlType::MXFP4, dequantize_mxfp4, quantize_mxfp4, vec_dot_mxfp4);
  set(t, GgmlType::IQ4_NL, dequantize_iq4_nl, quantize_iq4_nl, vec_dot_iq4_nl);
  set(t, GgmlType::Q2_K, dequantize_q2_k, quantize_q2_k, vec_dot_q2_k);
  set(t, GgmlType::Q3_K, dequantize_q3_k, quantize_q3_k, vec_dot_q3_k);
  set(t, GgmlType::Q4_K, dequantize_q4_k, quantize_q4_k, vec_dot_q4_k);
  set(t, GgmlType::Q5_K, dequantize_q5_k, quantize_q5_k, vec_dot_q5_k);
  set(t, GgmlType::Q6_K, dequantize_q6_k, quantize_q6_k, vec_dot_q6_k);
  set(t, GgmlType::Q8_K, dequantize_q8_k, quantize_q8_k, nullptr);
  // The i-quants and ternary types: dequantize and dot only (no weight quantizer).
  set(t, GgmlType::TQ1_0, dequantize_tq1_0, nullptr, vec_dot_tq1_0);
  set(t, GgmlType::TQ2_0, dequantize_tq2_0, nullptr, vec_dot_tq2_0);
  set(t, GgmlType::IQ4_XS, dequantize_iq4_xs, nullptr, vec_dot_iq4_xs);
  set(t, GgmlType::IQ2_XXS, dequantize_iq2_xxs, nullptr, vec_dot_iq2_xxs);
  set(t, GgmlType::IQ2_XS, dequantize_iq2_xs, nullptr, vec_dot_iq2_xs);
  set(t, GgmlType::IQ2_S, dequantize_iq2_s, nullptr, vec_dot_iq2_s);
  set(t, GgmlType::IQ3_XXS, dequantize_iq3_xxs, nullptr, vec_dot_iq3_xxs);
  set(t, GgmlType::IQ3_S, dequantize_iq3_s, nullptr, vec_dot_iq3_s);
  set(t, GgmlType::IQ1_S, dequantize_iq1_s, nullptr, vec_dot_iq1_s);
  set(t, GgmlType::IQ1_M, dequantize_iq1_m, nullptr, vec_dot_iq1_m);
  t.vec_dot_llamafile[size_t(GgmlType::IQ4_NL)] = vec_dot_iq4_nl_llamafile;
  t.vec_dot_repack[size_t(GgmlType::IQ4_NL)] = vec_dot_iq4_nl_repack;  // llama.cpp's GEMV and GEMM sum alike
  t.vec_dot_repack_gemm[size_t(GgmlType::IQ4_NL)] = vec_dot_iq4_nl_repack;
  t.vec_dot_panel[size_t(GgmlType::IQ2_XXS)] = vec_dot_panel_iq2_xxs;
  t.vec_dot_panel[size_t(GgmlType::IQ2_XS)] = vec_dot_panel_iq2_xs;
  t.vec_dot_panel[size_t(GgmlType::IQ2_S)] = vec_dot_panel_iq2_s;
  t.vec_dot_panel[size_t(GgmlType::IQ3_XXS)] = vec_dot_panel_iq3_xxs;
  t.vec_dot_panel[size_t(GgmlType::IQ3_S)] = vec_dot_panel_iq3_s;
  t.vec_dot_panel[size_t(GgmlType::IQ1_S)] = vec_dot_panel_iq1_s;
  t.vec_dot_panel[size_t(GgmlType::IQ1_M)] = vec_dot_panel_iq1_m;
  t.vec_dot_panel[size_t(GgmlType::IQ4_XS)] = vec_dot_panel_iq4_xs;
  t.vec_dot_repack[size_t(GgmlType::Q4_K)] = vec_dot_q4_k_repack;
  t.vec_dot_repack_gemm[size_t(GgmlType::Q4_K)] = vec_dot_q4_k_repack_gemm;
  t.vec_dot_repack[size_t(GgmlType::Q2_K)] = vec_dot_q2_k_repack;
  t.vec_dot_repack_gemm[size_t(GgmlType::Q2_K)] = vec_dot_q2_k_repack_gemm;
  t.add_scaled_f16 = add_scaled_f16;
  t.dot_f16_rows = dot_f16_rows;
  t.dot_f16_rows_tinyblas = dot_f16_rows_tinyblas;
  t.fma_f16_lanes = fma_f16_lanes;
  t.silu_blocks = silu_blocks;
  t.swiglu_blocks = swiglu_blocks;
  t.key_blocks = scalar_key_block_kernels();
  return t;
}

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29. Asked directly because clang 14's __builtin_cpu_supports does not
// know "f16c".
static bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & (1u << 29)) != 0;
}
#endif

bool cpu_has_avx2_level() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
  return false;
#endif
}

// AVX-512 F/BW/VL with VNNI (Ice Lake, Zen 4 and later); a CPU with AVX-512 but no VNNI
// (Skylake-X) stays at avx2.
bool cpu_has_avx512_level() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_has_avx2_level() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

struct Levels {
  KernelTable scalar, avx2, avx512;
  const KernelTable* list[3] = {};
  size_t count = 0;
  Levels() {
    scalar = make_scalar_table();
    list[count++] = &scalar;
    if (!cpu_has_avx2_level()) return;
    avx2 = scalar;
    add_avx2_kernels(avx2);
    list[count++] = &avx2;
    if (!cpu_has_avx512_level()) return;
    avx512 = avx2;
    add_avx512_kernels(avx512);
    list[count++] = &avx512;
  }
};

const Levels& levels() {
  static const Levels l;
  return l;
}

}  // namespace

bool have_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

const KernelTable& scalar_kernels() { return levels().scalar; }

std::span<const KernelTable* const> kernel_levels() { return {levels().list, levels().count}; }

const KernelTable& kernels_for_env(const char* value) {
  const Levels& l = levels();
  const std::string_view v = value ? value : "";
  // Levels in order; a wanted level above the CPU's is capped to the CPU's best.
  size_t wanted = 0;
  if (v.empty()) {
    wanted = l.count - 1;
  } else if (v == "scalar") {
    wanted = 0;
  } else if (v == "avx2") {
    wanted = 1;
  } else if (v == "avx512" || v == "avx512_vnni") {
    wanted = 2;
  } else {
    throw Error(ErrorCode::invalid_argument,
                "SLUICE_KERNELS='" + std::string(v) + "' is not a kernel level (scalar, avx2 or avx512)");
  }
  return *l.list[std::min(wanted, l.count - 1)];
}

const KernelTable& best_kernels() {
  static const KernelTable& table = kernels_for_env(std::getenv("SLUICE_KERNELS"));
  return table;
}

}  // namespace sluice::kernels::cpu
