// sluice bench kernels --gpu (see bench_kernels_gpu.h).
//
// For each type: a matrix of ~target_bytes in VRAM (16 distinct quantized rows repeated, as the
// CPU benchmark does: contents do not change the speed; random valid blocks for the types
// without a weight quantizer), a warm-up, then `iterations` matvecs between two CUDA events;
// GB/s counts weight bytes read. The reference bandwidths are the vendor's peak (memory clock x
// bus width) and a cudaMemcpy device-to-device copy of the same size timed the same way, counted
// as read + write bytes.
#include "tools/bench_kernels_gpu.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"

#if SLUICE_HAVE_CUDA
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#endif

namespace sluice::tools {

#if SLUICE_HAVE_CUDA

namespace {

namespace cu = kernels::cuda;

// Mean milliseconds per call of fn over `iterations` calls on `stream`, after 3 warm-up calls.
template <class F>
double time_ms(cu::Stream& stream, int iterations, F&& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cu::Event start, stop;
  start.record(stream);
  for (int i = 0; i < iterations; ++i) fn();
  stop.record(stream);
  stop.synchronize();
  return double(stop.elapsed_ms_since(start)) / iterations;
}

// Host bytes of a ~target_bytes matrix of `type` (n_rows a multiple of 64).
std::vector<std::byte> host_matrix(GgmlType type, int64_t n_cols, size_t target_bytes, int64_t* n_rows) {
  const size_t row_bytes = ggml_row_bytes(type, uint64_t(n_cols));
  *n_rows = std::max<int64_t>(int64_t(target_bytes / row_bytes) / 64 * 64, 64);
  std::vector<std::byte> bytes(row_bytes * size_t(*n_rows));
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_cols));
  constexpr int64_t kDistinct = 16;
  for (int64_t r = 0; r < std::min(kDistinct, *n_rows); ++r) {
    std::byte* dst = bytes.data() + size_t(r) * row_bytes;
    if (!kernels::has_weight_quantizer(type)) {  // the i-quants and ternary types: random valid blocks
      kernels::fill_random_blocks(type, n_cols, uint32_t(r), dst);
      continue;
    }
    for (auto& v : row) v = normal(rng);
    kernels::quantize_row(type, row.data(), dst, n_cols);
  }
  for (int64_t r = kDistinct; r < *n_rows; ++r)
    std::memcpy(bytes.data() + size_t(r) * row_bytes, bytes.data() + size_t(r % kDistinct) * row_bytes, row_bytes);
  return bytes;
}

}  // namespace

void bench_kernels_gpu(const GpuBenchOptions& o) {
  const auto dev = cu::probe();
  if (!dev) throw Error(ErrorCode::unsupported, "--gpu: no CUDA device found (no GPU or no driver)");
  for (GgmlType type : o.types)
    if (!cu::is_supported(type))
      throw Error(ErrorCode::unsupported, "--gpu: type " + std::string(ggml_type_name(type)) + " has no CUDA kernel");
  cu::Stream stream;

  // Device-to-device copy of the matrix size: the bandwidth a streaming kernel can hope for.
  double copy_gbs = 0;
  {
    cu::DeviceBuffer a(o.target_bytes), b(o.target_bytes);
    const double ms = time_ms(stream, o.iterations,
                              [&] { cu::copy_device_to_device(b.data(), a.data(), o.target_bytes, stream); });
    copy_gbs = 2.0 * double(o.target_bytes) / (ms * 1e-3) / 1e9;
  }
  std::printf("gpu: %s, sm_%d%d, %d SMs, %.1f GiB; HBM peak %.0f GB/s; device copy %.0f GB/s (read+write)\n",
              dev->name.c_str(), dev->sm_major, dev->sm_minor, dev->multiprocessors,
              double(dev->total_bytes) / double(1 << 30), dev->peak_bandwidth_gbs, copy_gbs);
  std::printf("matrix %lld columns, ~%zu MiB per type, mean of %d calls\n", static_cast<long long>(o.n_cols),
              o.target_bytes >> 20, o.iterations);
  std::printf("%-8s %10s %10s %10s %10s %10s %8s %8s\n", "type", "rows", "MiB", "us/matvec", "GB/s", "GFLOP/s",
              "%peak", "%copy");
  std::fflush(stdout);

  cu::DeviceBuffer dx(size_t(o.n_cols) * 4);
  {
    const std::vector<float> x(size_t(o.n_cols), 0.5f);
    cu::copy_to_device(dx.data(), x.data(), x.size() * 4, stream);
    stream.synchronize();
  }
  for (GgmlType type : o.types) {
    int64_t n_rows = 0;
    const auto bytes = host_matrix(type, o.n_cols, o.target_bytes, &n_rows);
    cu::DeviceBuffer dw(bytes.size()), dy(size_t(n_rows) * 4);
    cu::copy_to_device(dw.data(), bytes.data(), bytes.size(), stream);
    stream.synchronize();
    const cu::DeviceMatrix w{type, dw.data(), o.n_cols, n_rows, ggml_row_bytes(type, uint64_t(o.n_cols))};
    const auto* x = reinterpret_cast<const float*>(dx.data());
    auto* y = reinterpret_cast<float*>(dy.data());
    const double ms = time_ms(stream, o.iterations, [&] { cu::matvec(w, x, y, stream); });
    const double gbs = double(bytes.size()) / (ms * 1e-3) / 1e9;
    const double gflops = 2.0 * double(n_rows) * double(o.n_cols) / (ms * 1e-3) / 1e9;
    std::printf("%-8s %10lld %10.1f %10.1f %10.1f %10.1f %7.1f%% %7.1f%%\n", std::string(ggml_type_name(type)).c_str(),
                static_cast<long long>(n_rows), double(bytes.size()) / (1 << 20), ms * 1e3, gbs, gflops,
                100.0 * gbs / dev->peak_bandwidth_gbs, 100.0 * gbs / copy_gbs);
    std::fflush(stdout);
  }
}

#else

void bench_kernels_gpu(const GpuBenchOptions&) {
  throw Error(ErrorCode::unsupported, "--gpu: this sluice was built without CUDA (configure where nvcc is found)");
}

#endif

}  // namespace sluice::tools
