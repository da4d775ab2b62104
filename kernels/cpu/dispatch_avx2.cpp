// Installs the AVX2 kernels into a dispatch table (called only when the CPU has AVX2+FMA+F16C).
#include "common/ggml_type.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx2_iq.h"
#include "kernels/cpu/dispatch.h"

namespace sluice::kernels::cpu {

void add_avx2_kernels(KernelTable& t) {
  t.isa = "avx2";
  auto dot = [&t](GgmlType type, VecDotFn fn) { t.vec_dot[size_t(type)] = fn; };
  auto quantize = [&t](GgmlType type, QuantizeFn fn) { t.quantize[size_t(type)] = fn; };
  t.dequantize[size_t(GgmlType::F16)] = avx2::dequantize_f16;
  t.add_scaled_f16 = avx2::add_scaled_f16;
  t.dot_f16_rows = avx2::dot_f16_rows;
  t.dot_f16_rows_tinyblas = avx2::dot_f16_rows_tinyblas;
  t.fma_f16_lanes = avx2::fma_f16_lanes;
  t.silu_blocks = avx2::silu_blocks;  // the scalar emulation with fma instructions
  t.swiglu_blocks = avx2::swiglu_blocks;
  t.key_blocks = avx2::key_block_kernels();  // the plain bodies with fma instructions
  quantize(GgmlType::Q8_0, avx2::quantize_q8_0);
  quantize(GgmlType::Q8_1, avx2::quantize_q8_1);
  quantize(GgmlType::Q8_K, avx2::quantize_q8_k);
  quantize(GgmlType::F16, avx2::quantize_f16);
  dot(GgmlType::F32, avx2::vec_dot_f32);
  dot(GgmlType::F16, avx2::vec_dot_f16);
  dot(GgmlType::BF16, avx2::vec_dot_bf16);
  dot(GgmlType::Q4_0, avx2::vec_dot_q4_0);
  dot(GgmlType::Q4_1, avx2::vec_dot_q4_1);
  dot(GgmlType::Q5_0, avx2::vec_dot_q5_0);
  dot(GgmlType::Q5_1, avx2::vec_dot_q5_1);
  dot(GgmlType::Q8_0, avx2::vec_dot_q8_0);
  dot(GgmlType::MXFP4, avx2::vec_dot_mxfp4);
  dot(GgmlType::IQ4_NL, avx2::vec_dot_iq4_nl);
  t.vec_dot_llamafile[size_t(GgmlType::IQ4_NL)] = avx2::vec_dot_iq4_nl_llamafile;
  t.vec_dot_repack[size_t(GgmlType::IQ4_NL)] = avx2::vec_dot_iq4_nl_repack;
  t.vec_dot_repack_gemm[size_t(GgmlType::IQ4_NL)] = avx2::vec_dot_iq4_nl_repack;
  dot(GgmlType::Q2_K, avx2::vec_dot_q2_k);
  dot(GgmlType::Q3_K, avx2::vec_dot_q3_k);
  dot(GgmlType::Q4_K, avx2::vec_dot_q4_k);
  dot(GgmlType::Q5_K, avx2::vec_dot_q5_k);
  dot(GgmlType::Q6_K, avx2::vec_dot_q6_k);
  t.vec_dot_repack[size_t(GgmlType::Q4_K)] = avx2::vec_dot_q4_k_repack;
  t.vec_dot_repack_gemm[size_t(GgmlType::Q4_K)] = avx2::vec_dot_q4_k_repack_gemm;
  t.vec_dot_repack[size_t(GgmlType::Q2_K)] = avx2::vec_dot_q2_k_repack;
  t.vec_dot_repack_gemm[size_t(GgmlType::Q2_K)] = avx2::vec_dot_q2_k_repack_gemm;
  // x8 only where it measured faster than two x4 calls (sluice bench kernels --tokens 64): Q3_K,
  // whose weight unpacking is the costliest; Q2_K and Q6_K lose to register pressure.
  auto multi = [](VecDotMultiFn (&slot)[kTypeSlots][3], GgmlType type, VecDotMultiFn x2, VecDotMultiFn x4,
                  VecDotMultiFn x8 = nullptr) {
    slot[size_t(type)][0] = x2;
    slot[size_t(type)][1] = x4;
    slot[size_t(type)][2] = x8;
  };
  multi(t.vec_dot_multi, GgmlType::Q4_K, avx2::vec_dot_q4_k_x2, avx2::vec_dot_q4_k_x4);
  multi(t.vec_dot_multi, GgmlType::Q8_0, avx2::vec_dot_q8_0_x2, avx2::vec_dot_q8_0_x4);
  multi(t.vec_dot_multi, GgmlType::Q4_0, avx2::vec_dot_q4_0_x2, avx2::vec_dot_q4_0_x4);
  multi(t.vec_dot_multi, GgmlType::Q5_0, avx2::vec_dot_q5_0_x2, avx2::vec_dot_q5_0_x4);
  multi(t.vec_dot_multi, GgmlType::MXFP4, avx2::vec_dot_mxfp4_x2, avx2::vec_dot_mxfp4_x4);
  multi(t.vec_dot_multi, GgmlType::IQ4_NL, avx2::vec_dot_iq4_nl_x2, avx2::vec_dot_iq4_nl_x4);
  multi(t.vec_dot_repack_multi, GgmlType::IQ4_NL, avx2::vec_dot_iq4_nl_repack_x2, avx2::vec_dot_iq4_nl_repack_x4);
  multi(t.vec_dot_repack_gemm_multi, GgmlType::IQ4_NL, avx2::vec_dot_iq4_nl_repack_x2,
        avx2::vec_dot_iq4_nl_repack_x4);
  multi(t.vec_dot_llamafile_multi, GgmlType::IQ4_NL, avx2::vec_dot_iq4_nl_llamafile_x2,
        avx2::vec_dot_iq4_nl_llamafile_x4);
  multi(t.vec_dot_multi, GgmlType::Q2_K, avx2::vec_dot_q2_k_x2, avx2::vec_dot_q2_k_x4);
  multi(t.vec_dot_multi, GgmlType::Q3_K, avx2::vec_dot_q3_k_x2, avx2::vec_dot_q3_k_x4, avx2::vec_dot_q3_k_x8);
  multi(t.vec_dot_multi, GgmlType::Q6_K, avx2::vec_dot_q6_k_x2, avx2::vec_dot_q6_k_x4);
  // The i-quants and ternary types: one-row, x2 and x4 (no x8: not measured faster yet).
  const struct {
    GgmlType type;
    VecDotFn one;
    VecDotMultiFn x2, x4;
  } iq[] = {{GgmlType::TQ1_0, avx2::vec_dot_tq1_0, avx2::vec_dot_tq1_0_x2, avx2::vec_dot_tq1_0_x4},
            {GgmlType::TQ2_0, avx2::vec_dot_tq2_0, avx2::vec_dot_tq2_0_x2, avx2::vec_dot_tq2_0_x4},
            {GgmlType::IQ4_XS, avx2::vec_dot_iq4_xs, avx2::vec_dot_iq4_xs_x2, avx2::vec_dot_iq4_xs_x4},
            {GgmlType::IQ2_XXS, avx2::vec_dot_iq2_xxs, avx2::vec_dot_iq2_xxs_x2, avx2::vec_dot_iq2_xxs_x4},
            {GgmlType::IQ2_XS, avx2::vec_dot_iq2_xs, avx2::vec_dot_iq2_xs_x2, avx2::vec_dot_iq2_xs_x4},
            {GgmlType::IQ2_S, avx2::vec_dot_iq2_s, avx2::vec_dot_iq2_s_x2, avx2::vec_dot_iq2_s_x4},
            {GgmlType::IQ3_XXS, avx2::vec_dot_iq3_xxs, avx2::vec_dot_iq3_xxs_x2, avx2::vec_dot_iq3_xxs_x4},
            {GgmlType::IQ3_S, avx2::vec_dot_iq3_s, avx2::vec_dot_iq3_s_x2, avx2::vec_dot_iq3_s_x4},
            {GgmlType::IQ1_S, avx2::vec_dot_iq1_s, avx2::vec_dot_iq1_s_x2, avx2::vec_dot_iq1_s_x4},
            {GgmlType::IQ1_M, avx2::vec_dot_iq1_m, avx2::vec_dot_iq1_m_x2, avx2::vec_dot_iq1_m_x4}};
  for (const auto& k : iq) {
    dot(k.type, k.one);
    multi(t.vec_dot_multi, k.type, k.x2, k.x4);
  }
  multi(t.vec_dot_repack_multi, GgmlType::Q4_K, avx2::vec_dot_q4_k_repack_x2, avx2::vec_dot_q4_k_repack_x4);
  multi(t.vec_dot_repack_gemm_multi, GgmlType::Q4_K, avx2::vec_dot_q4_k_repack_gemm_x2,
        avx2::vec_dot_q4_k_repack_gemm_x4);
  multi(t.vec_dot_repack_multi, GgmlType::Q2_K, avx2::vec_dot_q2_k_repack_x2, avx2::vec_dot_q2_k_repack_x4);
  multi(t.vec_dot_repack_gemm_multi, GgmlType::Q2_K, avx2::vec_dot_q2_k_repack_gemm_x2,
        avx2::vec_dot_q2_k_repack_gemm_x4);
  // The IQ panel's order (prompt products): one-row and x4, the batches it serves being >= 8 rows.
  const struct {
    GgmlType type;
    VecDotFn one;
    VecDotMultiFn x4;
  } panel[] = {{GgmlType::IQ2_XXS, avx2::vec_dot_panel_iq2_xxs, avx2::vec_dot_panel_iq2_xxs_x4},
               {GgmlType::IQ2_XS, avx2::vec_dot_panel_iq2_xs, avx2::vec_dot_panel_iq2_xs_x4},
               {GgmlType::IQ2_S, avx2::vec_dot_panel_iq2_s, avx2::vec_dot_panel_iq2_s_x4},
               {GgmlType::IQ3_XXS, avx2::vec_dot_panel_iq3_xxs, avx2::vec_dot_panel_iq3_xxs_x4},
               {GgmlType::IQ3_S, avx2::vec_dot_panel_iq3_s, avx2::vec_dot_panel_iq3_s_x4},
               {GgmlType::IQ4_XS, avx2::vec_dot_panel_iq4_xs, avx2::vec_dot_panel_iq4_xs_x4},
               {GgmlType::IQ1_S, avx2::vec_dot_panel_iq1_s, avx2::vec_dot_panel_iq1_s_x4},
               {GgmlType::IQ1_M, avx2::vec_dot_panel_iq1_m, avx2::vec_dot_panel_iq1_m_x4}};
  for (const auto& k : panel) {
    t.vec_dot_panel[size_t(k.type)] = k.one;
    multi(t.vec_dot_panel_multi, k.type, nullptr, k.x4);
  }
}

}  // namespace sluice::kernels::cpu
