// The tiled GEMMs (KernelTable::repack_tile: rows packed once per batch, one lane per row)
// give every row and token exactly the scalar table's result in the order they implement, alone
// and inside matmul, where a batch mixes GEMM-order groups, GEMV-order tokens and a partial tile.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "kernels/thread_pool.h"
#include "tests/cpu_flags.h"
#include "tests/kernels_reference.h"

using sluice::GgmlType;
using sluice::kernels::GgmlRepack;
using sluice::kernels::ThreadPool;
using sluice::kernels::WeightMatrix;
using namespace sluice::kernels::cpu;
using namespace sluice::test;

namespace {

constexpr GgmlType kType = GgmlType::Q4_K;

// Only the avx512_vnni level has the tiles. On a CPU with that level (read from /proc/cpuinfo, not
// from the dispatch under test) the cases must check them; on one without it there is nothing to
// check, and they say so (a hardware skip, as for a missing GPU).
constexpr const char* kTileIsa = "avx512_vnni";
constexpr const char* kNoTileLevel = "skipped: this CPU lacks AVX-512 F/BW/VL/DQ + VNNI, the level with the tiled GEMMs";

// Whether best_kernels(), which matmul uses, must carry the tile: the CPU has the level and
// SLUICE_KERNELS does not pick a lower one.
bool best_level_has_tile() { return cpu_has_avx512_vnni_level() && std::getenv("SLUICE_KERNELS") == nullptr; }

// Rows from random values (the quantizer's scales) and rows of random blocks (every scale, min
// and nibble pattern), alternating.
std::vector<std::byte> weight_rows(int64_t n_rows, int64_t n_cols, uint32_t seed) {
  const size_t row_bytes = sluice::ggml_row_bytes(kType, uint64_t(n_cols));
  std::vector<std::byte> bytes(row_bytes * size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::byte* dst = bytes.data() + size_t(r) * row_bytes;
    if (r % 2) {
      sluice::kernels::fill_random_blocks(kType, n_cols, seed + uint32_t(r), dst);
    } else {
      const auto row = random_row(n_cols, seed + uint32_t(r), 0.05f * float(1 + r % 5));
      sluice::kernels::quantize_row(kType, row.data(), dst, n_cols);
    }
  }
  return bytes;
}

// Q8_K activation rows with the scalar quantizer; every third token saturates (all +-127), which
// puts the sub-block sums at their extremes.
std::vector<std::byte> activation_rows(int64_t n_tokens, int64_t n_cols, uint32_t seed) {
  const size_t row_bytes = sluice::ggml_row_bytes(GgmlType::Q8_K, uint64_t(n_cols));
  std::vector<std::byte> act(row_bytes * size_t(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) {
    auto x = random_row(n_cols, seed + uint32_t(t));
    if (t % 3 == 2)
      for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 32) % 2 ? -1.0f : 1.0f;
    scalar_kernels().quantize[size_t(GgmlType::Q8_K)](x.data(), act.data() + size_t(t) * row_bytes, n_cols);
  }
  return act;
}

}  // namespace

TEST_CASE("tiled GEMM kernels equal the scalar repacked orders on every row and token, bit for bit") {
  constexpr int64_t n_cols = 1024, n_tokens = kGemmTileTokens;
  const auto w = weight_rows(kGemmTileRows, n_cols, 11);
  const auto act = activation_rows(n_tokens, n_cols, 40);
  const size_t row_bytes = sluice::ggml_row_bytes(kType, uint64_t(n_cols));
  const size_t act_row = sluice::ggml_row_bytes(GgmlType::Q8_K, uint64_t(n_cols));
  int checked = 0;
  bool tile_level_listed = false;
  for (const KernelTable* level : kernel_levels()) {
    tile_level_listed = tile_level_listed || std::string(level->isa) == kTileIsa;
    const TileGemm& tile = level->repack_tile[size_t(kType)];
    // Each tile against the scalar dot of the order it implements.
    const struct {
      const char* order;
      TileGemmFn gemm;
      VecDotFn reference;
    } orders[] = {{"GEMM", tile.gemm_order, scalar_kernels().vec_dot_repack_gemm[size_t(kType)]},
                  {"GEMV", tile.gemv_order, scalar_kernels().vec_dot_repack[size_t(kType)]}};
    for (const auto& o : orders) {
      REQUIRE((o.reference != nullptr));
      // The AVX-512 level installs both; every batch of Q4_K rows then takes them.
      if (std::string(level->isa) == kTileIsa) REQUIRE((o.gemm != nullptr));
      if (!o.gemm) continue;
      std::vector<std::byte> packed(size_t(n_cols / 256) * tile.block_bytes);
      tile.pack(w.data(), row_bytes, n_cols, packed.data());
      // Outputs strided as in a matmul with more rows than the tile; 1 to kGemmTileTokens tokens.
      constexpr size_t out_stride = kGemmTileRows + 8;
      for (int count = 1; count <= n_tokens; ++count) {
        std::vector<float> out(out_stride * n_tokens, -1.0f);
        o.gemm(packed.data(), act.data(), act_row, n_cols, count, out.data(), out_stride);
        for (int64_t t = 0; t < count; ++t)
          for (int r = 0; r < kGemmTileRows; ++r) {
            const float want = o.reference(w.data() + size_t(r) * row_bytes, act.data() + size_t(t) * act_row, n_cols);
            const float got = out[size_t(t) * out_stride + size_t(r)];
            INFO(std::string(level->isa) << " " << std::string(o.order) << " order, " << count << " tokens, token "
                                         << t << " row " << r << ": " << got << " vs " << want);
            REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
          }
        // The gaps between a token's rows, and the tokens not asked for, stay untouched.
        for (int64_t t = 0; t < n_tokens; ++t) CHECK(out[size_t(t) * out_stride + kGemmTileRows] == -1.0f);
        for (int64_t t = count; t < n_tokens; ++t) CHECK(out[size_t(t) * out_stride] == -1.0f);
      }
      ++checked;
    }
  }
  MESSAGE(checked << " tiled Q4_K GEMM(s) checked");
  if (!cpu_has_avx512_vnni_level()) {
    MESSAGE(kNoTileLevel);
    return;
  }
  CHECK_MESSAGE(tile_level_listed, "the CPU has AVX-512 VNNI but kernel_levels() lacks " << kTileIsa);
  CHECK(checked >= 2);  // both orders of the avx512_vnni level
}

TEST_CASE("matmul through the tiled GEMM equals the scalar orders element by element") {
  // 40 rows: two whole tiles and a partial one. Runs of 3, 12 and 9 tokens: with mul_mat, GEMM
  // order for tokens 3..14 and 15..22, GEMV order for 0..2 and 23.
  constexpr int64_t n_cols = 512, n_rows = 40;
  // Without the tile matmul takes the row kernels, and the equality below would check nothing tiled.
  if (best_level_has_tile()) {
    REQUIRE((best_kernels().repack_tile[size_t(kType)].gemm_order != nullptr));
    REQUIRE((best_kernels().repack_tile[size_t(kType)].gemv_order != nullptr));
  } else if (!cpu_has_avx512_vnni_level()) {
    MESSAGE(kNoTileLevel << " (matmul checked through the row kernels)");
  }
  const std::vector<int64_t> runs = {0, 3, 15, 24};
  const int64_t n = runs.back();
  auto bytes = weight_rows(n_rows, n_cols, 5);
  const size_t row_bytes = sluice::ggml_row_bytes(kType, uint64_t(n_cols));
  WeightMatrix w{kType, bytes.data(), n_cols, n_rows, row_bytes};
  std::vector<float> x(size_t(n * n_cols));
  for (int64_t t = 0; t < n; ++t) {
    const auto row = random_row(n_cols, 70 + uint32_t(t));
    std::copy(row.begin(), row.end(), x.begin() + t * n_cols);
  }
  ThreadPool pool(2);
  const KernelTable& s = scalar_kernels();
  const size_t act_row = sluice::ggml_row_bytes(GgmlType::Q8_K, uint64_t(n_cols));
  std::vector<std::byte> act(act_row);
  // mul_mat: both orders by the runs; mul_mat_id (experts): the GEMV order for every token.
  for (GgmlRepack kind : {GgmlRepack::mul_mat, GgmlRepack::mul_mat_id}) {
    w.repack = kind;
    std::vector<float> y(size_t(n * n_rows));
    std::vector<std::byte> scratch(sluice::kernels::matmul_scratch_bytes(kType, n_cols, n, pool.size()));
    sluice::kernels::matmul(w, x, n, y, scratch, pool, runs);
    for (int64_t t = 0; t < n; ++t) {
      s.quantize[size_t(GgmlType::Q8_K)](x.data() + t * n_cols, act.data(), n_cols);
      const bool gemm_order = kind == GgmlRepack::mul_mat && t >= 3 && t < 23;
      const VecDotFn dot = gemm_order ? s.vec_dot_repack_gemm[size_t(kType)] : s.vec_dot_repack[size_t(kType)];
      for (int64_t r = 0; r < n_rows; ++r) {
        const float want = dot(bytes.data() + size_t(r) * row_bytes, act.data(), n_cols);
        const float got = y[size_t(t * n_rows + r)];
        INFO("repack " << int(kind) << " token " << t << " row " << r << (gemm_order ? " (GEMM order)" : " (GEMV order)"));
        REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
      }
    }
  }
}

TEST_CASE("matmul's packed tiles live in the caller's scratch, one per pool thread, and a scratch sized for fewer threads is refused") {
  // The budget counts matmul's scratch (core/llama/session.cpp, core/kimi_k3/kimi_k3_session.cpp);
  // a tile allocated anywhere else would be memory --budget never saw.
  constexpr int64_t n_cols = 512, n_rows = 40, n = 24;
  const TileGemm& tile = best_kernels().repack_tile[size_t(kType)];
  const size_t one = sluice::kernels::matmul_scratch_bytes(kType, n_cols, n, 1);
  const size_t four = sluice::kernels::matmul_scratch_bytes(kType, n_cols, n, 4);
  // A one-token call never takes a tile, so its scratch does not grow with the threads.
  CHECK(sluice::kernels::matmul_scratch_bytes(kType, n_cols, 1, 4) == sluice::kernels::matmul_scratch_bytes(kType, n_cols, 1, 1));
  if (best_level_has_tile()) REQUIRE((tile.pack != nullptr));
  if (tile.pack == nullptr) {
    CHECK(four == one);  // this level has no tile (AVX2 and below): nothing per thread to count
    if (!cpu_has_avx512_vnni_level()) MESSAGE(kNoTileLevel);
    return;
  }
  const size_t tile_bytes = size_t(n_cols / 256) * tile.block_bytes;
  REQUIRE(four - one >= 3 * tile_bytes);
  REQUIRE(four - one < 3 * (tile_bytes + 64));

  auto bytes = weight_rows(n_rows, n_cols, 9);
  const size_t row_bytes = sluice::ggml_row_bytes(kType, uint64_t(n_cols));
  WeightMatrix w{kType, bytes.data(), n_cols, n_rows, row_bytes};
  w.repack = GgmlRepack::mul_mat;
  std::vector<float> x(size_t(n * n_cols), 0.25f), y(size_t(n * n_rows));
  ThreadPool pool(4);
  std::vector<std::byte> short_scratch(one);
  try {
    sluice::kernels::matmul(w, x, n, y, short_scratch, pool);
    FAIL("a scratch sized for one thread was accepted by a pool of four");
  } catch (const sluice::Error& e) {
    CHECK_MESSAGE(std::string(e.what()).find("for 4 thread(s)") != std::string::npos, e.what());
  }
  // Sized for the pool, the tiles are written there: the bytes after the activations change.
  std::vector<std::byte> scratch(four, std::byte{0});
  sluice::kernels::matmul(w, x, n, y, scratch, pool);
  const size_t tiles_from = four - 4 * tile_bytes;
  CHECK(std::any_of(scratch.begin() + std::ptrdiff_t(tiles_from), scratch.end(), [](std::byte b) { return b != std::byte{0}; }));
}
