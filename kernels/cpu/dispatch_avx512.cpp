// Installs the AVX-512 (F/BW/VL + VNNI) kernels over the avx2 table (called only when the CPU has
// them). An entry is installed only where `sluice bench kernels` measured it faster than AVX2's;
// the rest keep the AVX2 (or scalar) entry.
#include "common/ggml_type.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/dispatch.h"

namespace sluice::kernels::cpu {

void add_avx512_kernels(KernelTable& t) {
  t.isa = "avx512_vnni";
  auto multi = [](VecDotMultiFn (&slot)[kTypeSlots][3], GgmlType type, VecDotMultiFn x2, VecDotMultiFn x4,
                  VecDotMultiFn x8) {
    slot[size_t(type)][0] = x2;
    slot[size_t(type)][1] = x4;
    slot[size_t(type)][2] = x8;
  };
  const struct {
    GgmlType type;
    VecDotFn one;
    VecDotMultiFn x2, x4, x8;
  } dots[] = {
      {GgmlType::Q2_K, avx512::vec_dot_q2_k, avx512::vec_dot_q2_k_x2, avx512::vec_dot_q2_k_x4, avx512::vec_dot_q2_k_x8},
      {GgmlType::Q3_K, avx512::vec_dot_q3_k, avx512::vec_dot_q3_k_x2, avx512::vec_dot_q3_k_x4, avx512::vec_dot_q3_k_x8},
      {GgmlType::Q4_K, avx512::vec_dot_q4_k, avx512::vec_dot_q4_k_x2, avx512::vec_dot_q4_k_x4, avx512::vec_dot_q4_k_x8},
      {GgmlType::Q5_K, avx512::vec_dot_q5_k, avx512::vec_dot_q5_k_x2, avx512::vec_dot_q5_k_x4, avx512::vec_dot_q5_k_x8},
      {GgmlType::Q6_K, avx512::vec_dot_q6_k, avx512::vec_dot_q6_k_x2, avx512::vec_dot_q6_k_x4, avx512::vec_dot_q6_k_x8},
      {GgmlType::Q8_0, avx512::vec_dot_q8_0, avx512::vec_dot_q8_0_x2, avx512::vec_dot_q8_0_x4, avx512::vec_dot_q8_0_x8},
      {GgmlType::Q4_0, avx512::vec_dot_q4_0, avx512::vec_dot_q4_0_x2, avx512::vec_dot_q4_0_x4, avx512::vec_dot_q4_0_x8},
      {GgmlType::Q4_1, avx512::vec_dot_q4_1, avx512::vec_dot_q4_1_x2, avx512::vec_dot_q4_1_x4, avx512::vec_dot_q4_1_x8},
      {GgmlType::Q5_0, avx512::vec_dot_q5_0, avx512::vec_dot_q5_0_x2, avx512::vec_dot_q5_0_x4, avx512::vec_dot_q5_0_x8},
      {GgmlType::Q5_1, avx512::vec_dot_q5_1, avx512::vec_dot_q5_1_x2, avx512::vec_dot_q5_1_x4, avx512::vec_dot_q5_1_x8},
      {GgmlType::MXFP4, avx512::vec_dot_mxfp4, avx512::vec_dot_mxfp4_x2, avx512::vec_dot_mxfp4_x4,
       avx512::vec_dot_mxfp4_x8},
      {GgmlType::IQ4_NL, avx512::vec_dot_iq4_nl, avx512::vec_dot_iq4_nl_x2, avx512::vec_dot_iq4_nl_x4,
       avx512::vec_dot_iq4_nl_x8},
      {GgmlType::IQ4_XS, avx512::vec_dot_iq4_xs, avx512::vec_dot_iq4_xs_x2, avx512::vec_dot_iq4_xs_x4,
       avx512::vec_dot_iq4_xs_x8},
      {GgmlType::IQ2_XXS, avx512::vec_dot_iq2_xxs, avx512::vec_dot_iq2_xxs_x2, avx512::vec_dot_iq2_xxs_x4,
       avx512::vec_dot_iq2_xxs_x8},
      {GgmlType::IQ2_XS, avx512::vec_dot_iq2_xs, avx512::vec_dot_iq2_xs_x2, avx512::vec_dot_iq2_xs_x4,
       avx512::vec_dot_iq2_xs_x8},
      {GgmlType::IQ2_S, avx512::vec_dot_iq2_s, avx512::vec_dot_iq2_s_x2, avx512::vec_dot_iq2_s_x4,
       avx512::vec_dot_iq2_s_x8},
      {GgmlType::IQ3_XXS, avx512::vec_dot_iq3_xxs, avx512::vec_dot_iq3_xxs_x2, avx512::vec_dot_iq3_xxs_x4,
       avx512::vec_dot_iq3_xxs_x8},
      {GgmlType::IQ3_S, avx512::vec_dot_iq3_s, avx512::vec_dot_iq3_s_x2, avx512::vec_dot_iq3_s_x4,
       avx512::vec_dot_iq3_s_x8},
  };
  for (const auto& k : dots) {
    t.vec_dot[size_t(k.type)] = k.one;
    multi(t.vec_dot_multi, k.type, k.x2, k.x4, k.x8);
  }
  t.vec_dot_repack[size_t(GgmlType::Q4_K)] = avx512::vec_dot_q4_k_repack;
  t.vec_dot_repack_gemm[size_t(GgmlType::Q4_K)] = avx512::vec_dot_q4_k_repack_gemm;
  multi(t.vec_dot_repack_multi, GgmlType::Q4_K, avx512::vec_dot_q4_k_repack_x2, avx512::vec_dot_q4_k_repack_x4,
        nullptr);
  multi(t.vec_dot_repack_gemm_multi, GgmlType::Q4_K, avx512::vec_dot_q4_k_repack_gemm_x2,
        avx512::vec_dot_q4_k_repack_gemm_x4, nullptr);
}

}  // namespace sluice::kernels::cpu
