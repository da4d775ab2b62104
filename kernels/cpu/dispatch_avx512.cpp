// Installs the AVX-512 (F/BW/VL + VNNI) kernels over the avx2 table (called only when the CPU has
// them). An entry is installed only where `sluice bench kernels` (and, for the repacked Q4_K
// orders, a direct timing) measured it faster than AVX2's; the rest keep the AVX2 (or scalar)
// entry. Every AVX-512 kernel equals the AVX2 one bit for bit, so a table mixing the two (an AVX2
// one-row kernel with AVX-512 multi-row ones) still gives each row one result.
#include "common/ggml_type.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/dispatch.h"

namespace sluice::kernels::cpu {

void add_avx512_kernels(KernelTable& t) {
  t.isa = "avx512_vnni";
  // Attention's weighted sum of F16 values: 1.5x AVX2's with the rows in cache (16 outputs of
  // 512 values over 1024 rows, one thread). The F16 scores' dot stays AVX2's: 16-lane F16
  // widening in AVX2's order measured 0.65x here (AMD EPYC).
  t.add_scaled_f16 = avx512::add_scaled_f16;
  // Attention scores: four heads share each widened key row (AVX2 does two).
  t.dot_f16_rows = avx512::dot_f16_rows;
  // A prompt's F16 attention in tinyBLAS's order: register-tiled (4 query x 4 key rows; values
  // with 8 lanes x 3 outputs), where the avx2 level's bodies are the plain loops.
  t.dot_f16_rows_tinyblas = avx512::dot_f16_rows_tinyblas;
  t.fma_f16_lanes = avx512::fma_f16_lanes;
  // silu/swiglu: ggml_v_expf itself, 16 lanes at a time.
  t.silu_blocks = avx512::silu_blocks;
  t.swiglu_blocks = avx512::swiglu_blocks;
  // Key-block attention (MLA's decompressed prefill): register tiles of 16-lane accumulators.
  t.key_blocks = avx512::key_block_kernels();
  // One-row: the k-quants whose integer work bounds them (Q2_K, Q4_K, Q6_K) and IQ4_XS. Q3_K, Q5_K
  // and the 32-value types measured no faster (their float chain or scale unpacking bounds them).
  t.vec_dot[size_t(GgmlType::Q2_K)] = avx512::vec_dot_q2_k;
  t.vec_dot[size_t(GgmlType::Q4_K)] = avx512::vec_dot_q4_k;
  t.vec_dot[size_t(GgmlType::Q6_K)] = avx512::vec_dot_q6_k;
  t.vec_dot[size_t(GgmlType::IQ4_XS)] = avx512::vec_dot_iq4_xs;
  t.vec_dot[size_t(GgmlType::TQ2_0)] = avx512::vec_dot_tq2_0;
  // Multi-row: x2, x4 and x8 (32 vector registers leave room for eight rows' accumulators; Q5_K's
  // x8 measured no faster than two x4 calls).
  const struct {
    GgmlType type;
    VecDotMultiFn x2, x4, x8;
  } multi[] = {
      {GgmlType::Q2_K, avx512::vec_dot_q2_k_x2, avx512::vec_dot_q2_k_x4, avx512::vec_dot_q2_k_x8},
      {GgmlType::Q3_K, avx512::vec_dot_q3_k_x2, avx512::vec_dot_q3_k_x4, avx512::vec_dot_q3_k_x8},
      {GgmlType::Q4_K, avx512::vec_dot_q4_k_x2, avx512::vec_dot_q4_k_x4, avx512::vec_dot_q4_k_x8},
      {GgmlType::Q5_K, avx512::vec_dot_q5_k_x2, avx512::vec_dot_q5_k_x4, nullptr},
      {GgmlType::Q6_K, avx512::vec_dot_q6_k_x2, avx512::vec_dot_q6_k_x4, avx512::vec_dot_q6_k_x8},
      {GgmlType::Q8_0, avx512::vec_dot_q8_0_x2, avx512::vec_dot_q8_0_x4, avx512::vec_dot_q8_0_x8},
      {GgmlType::Q4_0, avx512::vec_dot_q4_0_x2, avx512::vec_dot_q4_0_x4, avx512::vec_dot_q4_0_x8},
      {GgmlType::Q4_1, avx512::vec_dot_q4_1_x2, avx512::vec_dot_q4_1_x4, avx512::vec_dot_q4_1_x8},
      {GgmlType::Q5_0, avx512::vec_dot_q5_0_x2, avx512::vec_dot_q5_0_x4, avx512::vec_dot_q5_0_x8},
      {GgmlType::Q5_1, avx512::vec_dot_q5_1_x2, avx512::vec_dot_q5_1_x4, avx512::vec_dot_q5_1_x8},
      {GgmlType::MXFP4, avx512::vec_dot_mxfp4_x2, avx512::vec_dot_mxfp4_x4, avx512::vec_dot_mxfp4_x8},
      {GgmlType::IQ4_XS, avx512::vec_dot_iq4_xs_x2, avx512::vec_dot_iq4_xs_x4, avx512::vec_dot_iq4_xs_x8},
      {GgmlType::TQ2_0, avx512::vec_dot_tq2_0_x2, avx512::vec_dot_tq2_0_x4, avx512::vec_dot_tq2_0_x8},
  };
  for (const auto& k : multi) {
    t.vec_dot_multi[size_t(k.type)][0] = k.x2;
    t.vec_dot_multi[size_t(k.type)][1] = k.x4;
    t.vec_dot_multi[size_t(k.type)][2] = k.x8;
  }
  t.vec_dot_llamafile_multi[size_t(GgmlType::IQ4_NL)][0] = avx512::vec_dot_iq4_nl_llamafile_x2;
  t.vec_dot_llamafile_multi[size_t(GgmlType::IQ4_NL)][1] = avx512::vec_dot_iq4_nl_llamafile_x4;
  t.vec_dot_llamafile_multi[size_t(GgmlType::IQ4_NL)][2] = avx512::vec_dot_iq4_nl_llamafile_x8;
  // Q4_K's repacked GEMV order. The 4-row GEMM order's one-row kernels stay AVX2's (their per-pair
  // reductions measured slower at 512 bits); batches of either order take the tiled GEMMs, which
  // need none.
  static_assert(kGemmTileRows == 16 && kGemmTileTokens == avx512::kQ4KTileTokens);
  t.repack_tile[size_t(GgmlType::Q4_K)] = {avx512::pack_q4_k_tile, avx512::kQ4KTileBlockBytes,
                                           avx512::gemm_q4_k_tile, avx512::gemv_order_q4_k_tile};
  t.vec_dot_repack[size_t(GgmlType::Q4_K)] = avx512::vec_dot_q4_k_repack;
  t.vec_dot_repack_multi[size_t(GgmlType::Q4_K)][0] = avx512::vec_dot_q4_k_repack_x2;
  t.vec_dot_repack_multi[size_t(GgmlType::Q4_K)][1] = avx512::vec_dot_q4_k_repack_x4;
}

}  // namespace sluice::kernels::cpu
