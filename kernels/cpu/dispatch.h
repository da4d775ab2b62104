// The CPU kernel dispatch table: one function pointer per (operation, ggml type id).
//
// scalar_kernels() is the portable reference: plain C++ that follows ggml's arithmetic and is the
// definition of "correct" for every SIMD path. The SIMD levels stack: "avx2" is the scalar table
// with AVX2 entries over it, "avx512_vnni" the avx2 table with AVX-512 (F/BW/VL + VNNI) entries
// over that. Every level's dots give the level below's results bit for bit where that level
// matches the scalar table, and the avx2 table's (ggml's x86 order) where the avx2 order differs.
// best_kernels() is the highest level the running CPU supports (checked once with
// __builtin_cpu_supports on first use; thread-safe static initialisation, never written again),
// capped by the environment variable SLUICE_KERNELS=scalar|avx2|avx512, so one binary runs on any
// x86-64 and a benchmark can compare levels.
//
// Pointers take untyped bytes: `src`/`w` point at ggml blocks, `act` at the activation row already
// quantized to the weight type's vec_dot_type. n is the number of values (a multiple of the block
// size). A null entry means the operation does not exist for that type.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/matvec.h"

namespace sluice::kernels::cpu {

using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);
using VecDotFn = float (*)(const void* w, const void* act, int64_t n);
// One weight row against several activation rows (act, act + act_stride, ...), out[t] for row t:
// the weight blocks are unpacked once for all of them, and each out[t] is bit-identical to the
// single-row VecDotFn of the same table slot on row t.
using VecDotMultiFn = void (*)(const void* w, const void* act, size_t act_stride, int64_t n, float* out);
// For j = 0 .. n_rows-1 in order: out[g][i] += weight[g][j] * v_j[i] for g < n_out, v_j the F16
// row of n values at rows + j * row_stride: a multiply and an add, each rounded (never fused), so
// every output is the scalar loop's `o[i] += w * v[i]` run row after row.
using AddScaledF16Fn = void (*)(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                                const float* const* weight, float* const* out, int n_out);
// For each of n_rows F16 rows (rows + j * row_stride, n values) and each of n_q F16 activation
// rows q[h]: out[h][j] = the table's vec_dot[F16](row j, q[h], n), bit for bit. Attention's
// scores: the heads that share a KV head widen each cached key row once between them.
using DotF16RowsFn = void (*)(const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                              const uint16_t* const* q, int n_q, float* const* out);
// Attention's batched products on an F16 KV cache in llamafile's tinyBLAS<16> order (ggml takes it
// for >= 2 tokens once q, or the softmaxed kq, is rounded to F16), every level bit for bit:
// dot_f16_rows_tinyblas (a DotF16RowsFn, n % 16 == 0): out[h][j] = one 16-lane FMA accumulator
// over the widened row j and q[h] in 16-value steps, then _mm512_reduce_add_ps's order.
// FmaF16LanesFn: V^T kq in the same order a tile of cells at a time; cell c = first_cell + j adds
// into lane c % 16: lanes[g][i * 16 + c % 16] = fma(v_j[i], weight[g][j], that lane), rows j in
// order. Each lanes[g] holds 16 * n floats; kernels::reduce_tinyblas_lanes sums them at the end.
// `scratch` holds tinyblas_lanes_scratch_floats(n, n_out, n_rows + first_cell % 16) floats (or more;
// the transposed group).
using FmaF16LanesFn = void (*)(const std::byte* rows, size_t row_stride, int64_t first_cell, int64_t n_rows, int64_t n,
                               const float* const* weight, float* const* lanes, int n_out, float* scratch);
// Cells an FmaF16LanesFn transposes at a time; the 16-cell chunks of a call's group (a call over
// fewer cells needs fewer: a short context keeps a small scratch); the scratch for calls over at
// most `cells` cells from a 16-aligned start.
inline constexpr int64_t kTbVtCells = 512;
inline int64_t tinyblas_group_chunks(int64_t first_cell, int64_t n_rows) {
  return std::min<int64_t>(kTbVtCells / 16, (first_cell % 16 + n_rows + 15) / 16);
}
inline size_t tinyblas_lanes_scratch_floats(int64_t n, int64_t n_out, int64_t cells) {
  return size_t(tinyblas_group_chunks(0, cells)) * 16 * size_t((n + 15) / 16 * 16 + n_out);
}
// ggml's vectorized silu over n values, n a multiple of 16 (the lanes ggml_v_expf takes):
// y[i] = x[i] / (1 + ggml_v_expf(-x[i])); swiglu's y[i] = silu(gate[i]) * up[i]. y may alias an
// input. Every level gives cpu/expf_ggml.h's scalar emulation bit for bit.
using SiluBlocksFn = void (*)(const float* x, float* y, size_t n);
using SwigluBlocksFn = void (*)(const float* gate, const float* up, float* y, size_t n);
// Tiled GEMMs for the batches of a type: pack rewrites kGemmTileRows weight rows (rows, rows +
// row_stride, ...; n values each) into the kernels' own layout at `packed` (TileGemm::block_bytes
// per block of the weight type), once per batch; each TileGemmFn then multiplies that tile with
// n_tokens (1 to kGemmTileTokens) activation rows (act, act + act_stride, ...) and writes
// out[t * out_stride + r] for tile row r and token t. Each output is bit-identical to the table
// slot whose order it implements (see KernelTable::repack_tile).
constexpr int kGemmTileRows = 16;
constexpr int kGemmTileTokens = kGemmTokenGroup;
using PackTileFn = void (*)(const std::byte* rows, size_t row_stride, int64_t n, std::byte* packed);
using TileGemmFn = void (*)(const std::byte* packed, const void* act, size_t act_stride, int64_t n, int n_tokens,
                            float* out, size_t out_stride);
struct TileGemm {
  PackTileFn pack = nullptr;
  size_t block_bytes = 0;
  TileGemmFn gemm_order = nullptr;  // the repacked 4-row GEMM's order (vec_dot_repack_gemm)
  TileGemmFn gemv_order = nullptr;  // the repacked GEMV's order (vec_dot_repack)
};

// The key-block attention kernels (kernels/key_block_attention.h: same names and contracts, raw
// pointers for the spans). Every level gives the same bits: each output is one fma chain.
struct KeyBlockKernels {
  void (*decompress_keys)(const float* lt, int64_t n_blocks, int64_t n_in, const float* wt, size_t wt_stride,
                          int64_t d, uint16_t* kt, size_t kt_block_stride) = nullptr;
  void (*decompress_values)(const float* lt, int64_t n_cells, int64_t n_in, const float* wt, size_t wt_stride,
                            int64_t d, uint16_t* v, size_t v_stride) = nullptr;
  void (*scores)(const uint16_t* kt, size_t kt_block_stride, int64_t n_blocks, int64_t d, const float* const* q,
                 int n_q, float scale, float* const* out) = nullptr;
  float (*softmax_chunk)(float* s, int64_t n, float* max, float* lanes) = nullptr;
  void (*add_weighted)(const uint16_t* v, size_t v_stride, int64_t n_cells, int64_t d, const float* const* w,
                       int n_w, float* const* out) = nullptr;
};
KeyBlockKernels scalar_key_block_kernels();

constexpr size_t kTypeSlots = 40;  // ggml type ids 0..39
// The fewest activation rows for which llama.cpp takes its IQ panel GEMM (GGML_IQP_MIN_BATCH and
// GGML_IQP_MIN_BATCH_ID in the reference build's ggml-cpu/iqp.cpp).
constexpr int64_t kPanelMinTokens = 8;

struct KernelTable {
  const char* isa = "scalar";
  DequantizeFn dequantize[kTypeSlots] = {};
  QuantizeFn quantize[kTypeSlots] = {};
  VecDotFn vec_dot[kTypeSlots] = {};
  // The same dot in the summation order of llama.cpp's repacked GEMV/GEMM, for weight matrices
  // that llama.cpp repacks (WeightMatrix::repacked); null where sluice has no such order.
  VecDotFn vec_dot_repack[kTypeSlots] = {};       // the GEMV's order (per super-block)
  VecDotFn vec_dot_repack_gemm[kTypeSlots] = {};  // the 4-row GEMM's order (per sub-block pair)
  // The same dot in the order of llama.cpp's IQ panel GEMM (scalar_iq.h), for the types it
  // covers (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS); null elsewhere. A
  // matrix ggml_repacks() lists for these types takes it for every row of a run of at least
  // kPanelMinTokens tokens (kernels/matvec.h), vec_dot for shorter runs. One order at every level
  // (scalar, and AVX2 with x4, equal to it bit for bit).
  VecDotFn vec_dot_panel[kTypeSlots] = {};
  // The same dot in the order of llamafile's tinyBLAS, where that differs from vec_dot's (IQ4_NL):
  // llama.cpp's mul_mat of such a matrix that it does not repack takes it from 2 tokens
  // (kernels/matvec.h), vec_dot for one. Null elsewhere.
  VecDotFn vec_dot_llamafile[kTypeSlots] = {};
  // Multi-row versions of the three tables above, for 2, 4 and 8 activation rows ([0]: x2,
  // [1]: x4, [2]: x8, the last for batches: prefill, expert-major products); null where there is
  // none (matmul then takes the next smaller one, down to the single-row entry).
  static constexpr int kMultiWidths[3] = {2, 4, 8};
  VecDotMultiFn vec_dot_multi[kTypeSlots][3] = {};
  VecDotMultiFn vec_dot_repack_multi[kTypeSlots][3] = {};
  VecDotMultiFn vec_dot_repack_gemm_multi[kTypeSlots][3] = {};
  VecDotMultiFn vec_dot_llamafile_multi[kTypeSlots][3] = {};
  VecDotMultiFn vec_dot_panel_multi[kTypeSlots][3] = {};
  // The repacked orders as tiled GEMMs over one packing, for batches; empty where there is none
  // (matmul then takes the multi-row kernels).
  TileGemm repack_tile[kTypeSlots] = {};
  AddScaledF16Fn add_scaled_f16 = nullptr;
  DotF16RowsFn dot_f16_rows = nullptr;
  DotF16RowsFn dot_f16_rows_tinyblas = nullptr;
  FmaF16LanesFn fma_f16_lanes = nullptr;
  SiluBlocksFn silu_blocks = nullptr;
  SwigluBlocksFn swiglu_blocks = nullptr;
  KeyBlockKernels key_blocks;
};

const KernelTable& scalar_kernels();
// The highest supported level, capped by SLUICE_KERNELS (read once). An unknown SLUICE_KERNELS
// value is an Error(invalid_argument) naming the accepted ones; a level above the CPU's is capped
// to the CPU's best.
const KernelTable& best_kernels();
// Every level this CPU runs, lowest first: scalar, then avx2, then avx512_vnni (each only where the
// CPU has the features). Independent of SLUICE_KERNELS: tests compare every level with scalar.
std::span<const KernelTable* const> kernel_levels();
// The table best_kernels() picks for a SLUICE_KERNELS value ("" or unset: the CPU's best).
const KernelTable& kernels_for_env(const char* value);

// Whether the CPU runs code built with -mavx2 -mfma (checked once): picks the fma_impl copies of
// bodies compiled twice (dot_f32, softmax) over their plain ones.
bool have_avx2_fma();

// Defined in the *_avx2.cpp files (compiled with -mavx2 -mfma -mf16c); only called after the
// CPU check passes.
void add_avx2_kernels(KernelTable& table);
// Defined in the *_avx512.cpp files (-mavx512f -mavx512bw -mavx512vl -mavx512vnni ...); applied
// over the avx2 table, only after the CPU check passes.
void add_avx512_kernels(KernelTable& table);

}  // namespace sluice::kernels::cpu
