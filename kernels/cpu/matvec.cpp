// matvec / matmul: quantize the activation once, then split weight rows over the pool.
// Each output element is one vec_dot of one weight row, computed the same way whichever thread
// runs it, so results do not depend on the thread count.
#include "kernels/matvec.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/quant.h"

namespace sluice::kernels {
namespace {

// Rows per chunk: at least 16 so that neighbouring threads never share a cache line of y.
constexpr int64_t kRowGrain = 16;
// Weight bytes per row tile of a batched matmul: well inside a 512 KiB L2 beside the activations.
constexpr size_t kRowTileBytes = 96 * 1024;

void check_shapes(const WeightMatrix& w, size_t x_size, int64_t n_tokens, size_t y_size,
                  const std::byte* scratch_data, size_t scratch_size, unsigned n_threads) {
  require_supported(w.type, "matvec weight");
  const auto& traits = ggml_traits(w.type);
  auto fail = [](const std::string& msg) { throw Error(ErrorCode::invalid_argument, msg); };
  if (w.n_cols <= 0 || w.n_rows < 0 || n_tokens < 0)
    fail("matvec: bad shape " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) + " with " +
         std::to_string(n_tokens) + " tokens");
  if (w.n_rows > 0 && w.data == nullptr) fail("matvec: weight matrix has no data");
  if (w.n_cols % traits.block_size != 0)
    fail("matvec: row length " + std::to_string(w.n_cols) + " is not a multiple of " +
         std::string(traits.name) + "'s block size " + std::to_string(traits.block_size));
  const uint64_t act_block = ggml_traits(vec_dot_type(w.type)).block_size;
  if (w.n_cols % act_block != 0)
    fail("matvec: row length " + std::to_string(w.n_cols) +
         " is not a multiple of the activation block size " + std::to_string(act_block));
  if (w.row_stride < ggml_row_bytes(w.type, uint64_t(w.n_cols)))
    fail("matvec: row stride smaller than a row");
  if (x_size < size_t(w.n_cols * n_tokens))
    fail("matvec: x holds " + std::to_string(x_size) + " values, needs " +
         std::to_string(w.n_cols * n_tokens));
  if (y_size < size_t(w.n_rows * n_tokens))
    fail("matvec: y holds " + std::to_string(y_size) + " values, needs " +
         std::to_string(w.n_rows * n_tokens));
  if (reinterpret_cast<uintptr_t>(scratch_data) % 4 != 0) fail("matvec: scratch must be 4-byte aligned");
  const size_t need = matmul_scratch_bytes(w.type, w.n_cols, n_tokens, n_threads);
  if (scratch_size < need)
    fail("matvec: scratch holds " + std::to_string(scratch_size) + " bytes, needs " + std::to_string(need) +
         " for " + std::to_string(n_threads) + " thread(s)");
}

// One summation order's kernels: a row at a time, and 2 or 4 rows per call where they exist.
struct DotOrder {
  cpu::VecDotFn one;
  cpu::VecDotMultiFn x2;
  cpu::VecDotMultiFn x4;
  cpu::VecDotMultiFn x8;
};

// Which tokens of a run take the batched ("gemm") order: none without one; with one, the leading
// whole groups of `group` tokens of a run of at least `min_run` tokens.
struct GemmRule {
  bool any = false;
  int64_t min_run = 4, group = 4;  // the repacked GEMM's groups of 4 rows
};

// Calls f(begin, end, gemm) over the tokens in maximal ranges of one summation order: the tokens
// `rule` gives the GEMM order take it and the rest the GEMV order.
template <class F>
void for_each_order_segment(std::span<const int64_t> runs, GemmRule rule, F&& f) {
  const bool any_gemm = rule.any;
  const int64_t n = runs.back();
  if (!any_gemm) {
    if (n > 0) f(int64_t{0}, n, false);
    return;
  }
  int64_t seg_begin = 0, seg_end = 0;
  bool seg_gemm = false;
  auto add = [&](int64_t b, int64_t e, bool g) {
    if (b == e) return;
    if (seg_end > seg_begin && g == seg_gemm && b == seg_end) {
      seg_end = e;
      return;
    }
    if (seg_end > seg_begin) f(seg_begin, seg_end, seg_gemm);
    seg_begin = b, seg_end = e, seg_gemm = g;
  };
  for (size_t i = 0; i + 1 < runs.size(); ++i) {
    const int64_t a = runs[i], len = runs[i + 1] - runs[i];
    const int64_t g = len >= rule.min_run ? len - len % rule.group : 0;
    add(a, a + g, true);
    add(a + g, runs[i + 1], false);
  }
  if (seg_end > seg_begin) f(seg_begin, seg_end, seg_gemm);
}

// A batch of more than this many tokens takes the type's tiled GEMM where the level has one (one
// token measured slower through a tile: its packing is not shared).
constexpr int64_t kTileMinTokens = 9;
constexpr size_t kTileAlign = 64;
// A batch of at least this many tokens quantizes its activation rows on the pool.
constexpr int64_t kParallelQuantizeTokens = 16;

size_t align_up(size_t n) { return (n + kTileAlign - 1) / kTileAlign * kTileAlign; }

// One thread's packed tile for this weight type and batch, or 0 where the batch takes no tile.
size_t tile_pack_bytes(GgmlType type, int64_t n_cols, int64_t n_tokens) {
  const cpu::TileGemm& tile = cpu::best_kernels().repack_tile[size_t(type)];
  if (n_tokens < kTileMinTokens || tile.pack == nullptr) return 0;
  return align_up(size_t(n_cols / ggml_traits(type).block_size) * tile.block_bytes);
}

}  // namespace

bool ggml_repacks(GgmlType type, int64_t n_rows) {
  const bool ahead = type == GgmlType::Q4_K || type == GgmlType::Q2_K || type == GgmlType::IQ4_NL;
  return (ahead || cpu::scalar_kernels().vec_dot_panel[size_t(type)] != nullptr) && n_rows % 8 == 0;
}

bool order_depends_on_tokens(const WeightMatrix& w) {
  const cpu::KernelTable& k = cpu::scalar_kernels();
  return w.repack == GgmlRepack::mul_mat ||
         (w.repack != GgmlRepack::none && k.vec_dot_panel[size_t(w.type)] != nullptr) ||
         (w.repack == GgmlRepack::none && k.vec_dot_llamafile[size_t(w.type)] != nullptr);
}

size_t matmul_scratch_bytes(GgmlType weight_type, int64_t n_cols, int64_t n_tokens, unsigned n_threads) {
  const size_t act = size_t(ggml_row_bytes(vec_dot_type(weight_type), uint64_t(n_cols))) * size_t(n_tokens);
  const size_t tile = tile_pack_bytes(weight_type, n_cols, n_tokens);
  return tile ? align_up(act) + size_t(std::max(1u, n_threads)) * tile : act;
}

void matvec(const WeightMatrix& w, std::span<const float> x, std::span<float> y, std::span<std::byte> scratch,
            ThreadPool& pool) {
  matmul(w, x, 1, y, scratch, pool);
}

void matmul(const WeightMatrix& w, std::span<const float> x, int64_t n_tokens, std::span<float> y,
            std::span<std::byte> scratch, ThreadPool& pool, std::span<const int64_t> runs) {
  check_shapes(w, x.size(), n_tokens, y.size(), scratch.data(), scratch.size(), pool.size());
  if (!runs.empty() && (runs.size() < 2 || runs.front() != 0 || runs.back() != n_tokens ||
                        !std::is_sorted(runs.begin(), runs.end())))
    throw Error(ErrorCode::invalid_argument, "matmul: runs must rise from 0 to the token count");
  const cpu::KernelTable& k = cpu::best_kernels();
  const size_t ti = size_t(w.type);
  const GgmlType act_type = vec_dot_type(w.type);
  const size_t act_row = ggml_row_bytes(act_type, uint64_t(w.n_cols));
  const auto quantize = k.quantize[size_t(act_type)];
  // The dot of token t: vec_dot, or for a matrix llama.cpp repacks the GEMM's order for the
  // leading whole groups of 4 tokens of each run (when the run has at least 4) and the GEMV's
  // for the rest.
  auto order = [ti](const cpu::VecDotFn* one, const cpu::VecDotMultiFn (*multi)[3]) {
    return DotOrder{one[ti], multi[ti][0], multi[ti][1], multi[ti][2]};
  };
  DotOrder gemv = order(k.vec_dot, k.vec_dot_multi), gemm = gemv;
  GemmRule rule;
  if (w.repack != GgmlRepack::none && k.vec_dot_repack[ti] != nullptr) {
    gemv = gemm = order(k.vec_dot_repack, k.vec_dot_repack_multi);
    if (w.repack == GgmlRepack::mul_mat) {
      gemm = order(k.vec_dot_repack_gemm, k.vec_dot_repack_gemm_multi);
      rule.any = true;
    }
  } else if (w.repack != GgmlRepack::none && k.vec_dot_panel[ti] != nullptr) {
    // The IQ panel: a whole run of at least kPanelMinTokens rows, for mul_mat and (per expert)
    // mul_mat_id alike; shorter runs keep vec_dot.
    gemm = order(k.vec_dot_panel, k.vec_dot_panel_multi);
    rule = GemmRule{true, cpu::kPanelMinTokens, 1};
  } else if (w.repack == GgmlRepack::none && k.vec_dot_llamafile[ti] != nullptr) {
    // llamafile's tinyBLAS from 2 tokens (a matrix llama.cpp does not repack, e.g. a 3-D slice).
    gemm = order(k.vec_dot_llamafile, k.vec_dot_llamafile_multi);
    rule = GemmRule{true, 2, 1};
  }
  const bool any_gemm = rule.any;
  // Each token's activation row is quantized on its own, so a batch splits over the pool (run
  // serially it was ~3% of a 419-token prefill's wall time with the other thread idle).
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) quantize(x.data() + t * w.n_cols, scratch.data() + t * act_row, w.n_cols);
  };
  if (n_tokens >= kParallelQuantizeTokens)
    pool.parallel_for(n_tokens, kParallelQuantizeTokens / 2, [&](int64_t b, int64_t e) { quantize_rows(b, e); });
  else quantize_rows(0, n_tokens);

  const int64_t whole[2] = {0, n_tokens};
  const std::span<const int64_t> seq_runs = runs.empty() ? std::span<const int64_t>(whole) : runs;
  // Rows [r_begin, r_end) against tokens [s, e) in one order: several tokens per call (the weights
  // are unpacked once for all of them), every row of the range against that group of tokens while
  // its activations are hot.
  auto row_dots = [&](const DotOrder& o, int64_t r_begin, int64_t r_end, int64_t s, int64_t e) {
    auto dots = [&](int64_t t, int count) {
      const std::byte* act = scratch.data() + size_t(t) * act_row;
      for (int64_t r = r_begin; r < r_end; ++r) {
        const std::byte* row = w.data + size_t(r) * w.row_stride;
        float out[8];
        if (count == 8) o.x8(row, act, act_row, w.n_cols, out);
        else if (count == 4) o.x4(row, act, act_row, w.n_cols, out);
        else if (count == 2) o.x2(row, act, act_row, w.n_cols, out);
        else out[0] = o.one(row, act, w.n_cols);
        for (int i = 0; i < count; ++i) y[size_t((t + i) * w.n_rows + r)] = out[i];
      }
    };
    int64_t t = s;
    for (; o.x8 && e - t >= 8; t += 8) dots(t, 8);
    for (; o.x4 && e - t >= 4; t += 4) dots(t, 4);
    if (o.x2 && e - t >= 2) {
      dots(t, 2);
      t += 2;
    }
    for (; t < e; ++t) dots(t, 1);
  };

  // The repacked orders as tiled GEMMs, where the level has them: the GEMM order's for GEMM
  // segments, the GEMV order's for the rest (only when that order is the repacked GEMV's).
  const cpu::TileGemm& tile = k.repack_tile[ti];
  const cpu::TileGemmFn gemm_tile = any_gemm ? tile.gemm_order : nullptr;
  const cpu::TileGemmFn gemv_tile = gemv.one == k.vec_dot_repack[ti] ? tile.gemv_order : nullptr;
  const size_t packed_bytes = tile_pack_bytes(w.type, w.n_cols, n_tokens);
  if (packed_bytes > 0 && (gemm_tile || gemv_tile)) {
    // Each group of kGemmTileRows rows is packed once and then meets every token, kGemmTileTokens
    // at a time, through the tile kernel of their order; a last partial group of rows, and an
    // order without a tile, take the row kernels. Which order computes an element, and so its
    // value, does not change. The groups are split into one contiguous share per pool thread, so
    // share s packs into scratch tile s (after the activations) and no two chunks share one.
    const int64_t tile_rows = cpu::kGemmTileRows, group = cpu::kGemmTileTokens;
    const int64_t n_groups = (w.n_rows + tile_rows - 1) / tile_rows;
    const int64_t shares = std::min<int64_t>(std::max(1u, pool.size()), n_groups);
    std::byte* const tiles = scratch.data() + align_up(act_row * size_t(n_tokens));
    pool.parallel_for(shares, 1, [&](int64_t s_begin, int64_t s_end) {
      for (int64_t share = s_begin; share < s_end; ++share) {
        std::byte* const packed = tiles + size_t(share) * packed_bytes;
        for (int64_t g = n_groups * share / shares; g < n_groups * (share + 1) / shares; ++g) {
          const int64_t r0 = g * tile_rows, r1 = std::min(w.n_rows, r0 + tile_rows);
          const bool whole_tile = r1 - r0 == tile_rows;
          if (whole_tile) tile.pack(w.data + size_t(r0) * w.row_stride, w.row_stride, w.n_cols, packed);
          for_each_order_segment(seq_runs, rule, [&](int64_t s, int64_t e, bool is_gemm) {
            const cpu::TileGemmFn tile_gemm = is_gemm ? gemm_tile : gemv_tile;
            if (!whole_tile || !tile_gemm) return row_dots(is_gemm ? gemm : gemv, r0, r1, s, e);
            for (int64_t t = s; t < e; t += group)
              tile_gemm(packed, scratch.data() + size_t(t) * act_row, act_row, w.n_cols,
                        int(std::min(group, e - t)), y.data() + size_t(t * w.n_rows + r0), size_t(w.n_rows));
          });
        }
      }
    });
    return;
  }

  // Rows are taken a tile at a time (kRowTileBytes of weights, which stay in L2) and each tile
  // meets every token before the next: a batch's activations (8 MB for 1024 tokens of 7168
  // values) then stream from memory once per tile rather than once per row. A single token has
  // nothing to share, so its tile is one row. Which call computes an element does not change.
  const int64_t tile_rows =
      n_tokens <= 8 ? 1 : std::max<int64_t>(1, int64_t(kRowTileBytes / std::max<size_t>(w.row_stride, 1)));
  pool.parallel_for(w.n_rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; tile += tile_rows) {
      const int64_t tile_end = std::min(end, tile + tile_rows);
      for_each_order_segment(seq_runs, rule, [&](int64_t s, int64_t e, bool is_gemm) {
        row_dots(is_gemm ? gemm : gemv, tile, tile_end, s, e);
      });
    }
  });
}

size_t matvec_slices_scratch_bytes(GgmlType weight_type, int64_t n_cols, int64_t n_slices) {
  return matmul_scratch_bytes(weight_type, n_cols, n_slices, 1);  // one activation row per slice
}

void matvec_slices(const WeightMatrix& w, size_t slice_stride, int64_t n_slices, const float* x, size_t x_stride,
                   float* y, size_t y_stride, std::span<std::byte> scratch, ThreadPool& pool) {
  if (w.repack != GgmlRepack::none || w.type == GgmlType::F32 || w.type == GgmlType::F16)
    throw Error(ErrorCode::invalid_argument, "matvec_slices: only plain quantized matrices (got " +
                                                 std::string(ggml_traits(w.type).name) + ")");
  if (n_slices <= 0) return;
  // Shapes of one slice (x and y are checked for the last one's extent), then the activations.
  check_shapes(w, x_stride * size_t(n_slices - 1) + size_t(w.n_cols), 1,
               y_stride * size_t(n_slices - 1) + size_t(w.n_rows), scratch.data(), scratch.size(), 1);
  const size_t act_row = ggml_row_bytes(vec_dot_type(w.type), uint64_t(w.n_cols));
  if (scratch.size() < act_row * size_t(n_slices))
    throw Error(ErrorCode::invalid_argument, "matvec_slices: scratch holds " + std::to_string(scratch.size()) +
                                                 " bytes, needs " + std::to_string(act_row * size_t(n_slices)));
  const cpu::KernelTable& k = cpu::best_kernels();
  const auto quantize = k.quantize[size_t(vec_dot_type(w.type))];
  const cpu::VecDotFn dot = k.vec_dot[size_t(w.type)];
  for (int64_t s = 0; s < n_slices; ++s)
    quantize(x + size_t(s) * x_stride, scratch.data() + size_t(s) * act_row, w.n_cols);
  // Rows of every slice in one range: row i is row i % n_rows of slice i / n_rows.
  pool.parallel_for(n_slices * w.n_rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t s = i / w.n_rows, r = i % w.n_rows;
      const std::byte* row = w.data + size_t(s) * slice_stride + size_t(r) * w.row_stride;
      y[size_t(s) * y_stride + size_t(r)] = dot(row, scratch.data() + size_t(s) * act_row, w.n_cols);
    }
  });
}

}  // namespace sluice::kernels
