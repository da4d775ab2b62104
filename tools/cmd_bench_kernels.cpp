// sluice bench kernels: matvec throughput per weight type against streaming memory bandwidth.
//
// A decode step is one matvec per weight matrix, so a kernel is as good as the fraction of the
// machine's read bandwidth it turns into weight bytes consumed. For each type this builds a
// matrix larger than the last-level cache (so every call streams it from DRAM), times matvec with
// 1 thread and with all threads, and prints GB/s of weights read and GFLOP/s next to a plain
// streaming-read bandwidth measured in the same run with the same thread count. The last column,
// bytes per CPU-second of the whole process, separates kernel speed from a busy machine.
// With --gpu the same measurement runs on the CUDA kernels instead (tools/bench_kernels_gpu.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cxxopts.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/matvec.h"
#include "kernels/quant.h"
#include "kernels/random_blocks.h"
#include "kernels/thread_pool.h"
#include "tools/bench_kernels_gpu.h"
#include "tools/commands.h"

namespace sluice::tools {
namespace {

using Clock = std::chrono::steady_clock;

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct CallTime {
  double wall = 0;  // seconds per call
  double cpu = 0;   // CPU seconds per call, all threads of the process (spinning included)
};

// Runs fn until at least `seconds` have passed (and at least 3 times).
template <class F>
CallTime time_per_call(double seconds, F&& fn) {
  fn();  // warm-up: page faults, wake-ups
  int calls = 0;
  const auto start = Clock::now();
  const double cpu_start = process_cpu_seconds();
  double elapsed = 0;
  while (calls < 3 || elapsed < seconds) {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return {elapsed / calls, (process_cpu_seconds() - cpu_start) / calls};
}

// Streaming read of `buf` split over the pool; returns GB/s. A plain sum (the compiler vectorizes
// it) is the cheapest loop that touches every byte; the sums are kept so it cannot be dropped.
double stream_read_gbps(const std::vector<uint64_t>& buf, kernels::ThreadPool& pool, double seconds) {
  std::vector<uint64_t> sinks(64 * 8, 0);
  const int64_t n = int64_t(buf.size());
  const double per_call = time_per_call(seconds, [&] {
                            pool.parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
                              const uint64_t* p = buf.data();
                              uint64_t s = 0;
                              for (int64_t i = b; i < e; ++i) s += p[i];
                              sinks[size_t(b / (1 << 16)) % 64 * 8] += s;
                            });
                          }).wall;
  volatile uint64_t keep = 0;
  for (uint64_t s : sinks) keep = keep + s;
  return double(buf.size() * sizeof(uint64_t)) / per_call / 1e9;
}

struct BenchMatrix {
  std::vector<std::byte> bytes;
  kernels::WeightMatrix w;
};

// About `target_bytes` of `type` weights with n_cols columns. A few distinct rows are quantized
// properly and repeated: the contents do not change the speed, and quantizing 100 MB with the
// reference quantizers would dominate the run.
BenchMatrix make_matrix(GgmlType type, int64_t n_cols, size_t target_bytes) {
  const size_t row_bytes = ggml_row_bytes(type, uint64_t(n_cols));
  int64_t n_rows = int64_t(target_bytes / row_bytes) / 64 * 64;
  n_rows = std::max<int64_t>(n_rows, 64);
  BenchMatrix m;
  m.bytes.resize(row_bytes * size_t(n_rows));
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_cols));
  constexpr int64_t kDistinct = 16;
  for (int64_t r = 0; r < kDistinct; ++r) {
    for (auto& v : row) v = normal(rng);
    std::byte* dst = m.bytes.data() + size_t(r) * row_bytes;
    // Types without a weight quantizer (i-quants, TQ1_0/TQ2_0): random codes, small finite scales.
    if (kernels::has_weight_quantizer(type)) kernels::quantize_row(type, row.data(), dst, n_cols);
    else kernels::fill_random_blocks(type, n_cols, uint32_t(r), dst);
  }
  for (int64_t r = kDistinct; r < n_rows; ++r)
    std::memcpy(m.bytes.data() + size_t(r) * row_bytes, m.bytes.data() + size_t(r % kDistinct) * row_bytes,
                row_bytes);
  m.w = kernels::WeightMatrix{type, m.bytes.data(), n_cols, n_rows, row_bytes};
  // Summed as decode sums an expert of this type (llama.cpp's repacked GEMV order where it repacks).
  if (kernels::ggml_repacks(type, n_rows)) m.w.repack = kernels::GgmlRepack::mul_mat_id;
  return m;
}

std::vector<GgmlType> parse_types(const std::string& list) {
  std::vector<GgmlType> types;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string name = list.substr(pos, comma - pos);
    pos = comma + 1;
    if (name.empty()) continue;
    const auto type = ggml_type_from_name(name);
    if (!type) throw Error(ErrorCode::invalid_argument, "--types: unknown type '" + name + "'");
    kernels::require_supported(*type, "--types");
    types.push_back(*type);
  }
  return types;
}

}  // namespace

int cmd_bench_kernels(int argc, char** argv) {
  cxxopts::Options options(
      "sluice bench kernels",
      "matvec GB/s and GFLOP/s per weight type, next to streaming-read memory bandwidth");
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  options.add_options()("t,threads", "thread count for the multi-threaded rows",
                        cxxopts::value<unsigned>()->default_value(std::to_string(hw)))(
      "types", "comma-separated weight types",
      cxxopts::value<std::string>()->default_value(
          "f32,f16,bf16,q8_0,q6_K,q5_K,q4_K,q3_K,q2_K,q5_0,q4_0,q4_1,mxfp4,iq4_nl,"
          "iq4_xs,iq3_s,iq3_xxs,iq2_s,iq2_xs,iq2_xxs,iq1_m,iq1_s,tq2_0,tq1_0"))(
      "cols", "row length (n_embd-like)", cxxopts::value<int64_t>()->default_value("4096"))(
      "mb", "weight matrix size per type, MiB (keep it above the L3 size)",
      cxxopts::value<size_t>()->default_value("96"))("seconds", "minimum timing per measurement",
                                                     cxxopts::value<double>()->default_value("0.5"))(
      "gpu", "benchmark the CUDA kernels (VRAM-resident matrices) instead of the CPU's")(
      "gpu-mb", "with --gpu: weight matrix size per type, MiB (keep it far above the GPU's L2)",
      cxxopts::value<size_t>()->default_value("256"))(
      "iters", "with --gpu: timed calls per type after the warm-up", cxxopts::value<int>()->default_value("20"))(
      "tokens", "also time one matmul of this many tokens and print its speed-up over as many matvecs "
                "(CPU time; >1 where the kernel unpacks each weight block once for several tokens)",
      cxxopts::value<int64_t>()->default_value("1"))("h,help", "show this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const unsigned threads = args["threads"].as<unsigned>();
  const int64_t n_cols = args["cols"].as<int64_t>();
  const size_t target = args["mb"].as<size_t>() << 20;
  const double seconds = args["seconds"].as<double>();
  const int64_t n_tokens = args["tokens"].as<int64_t>();
  if (n_tokens < 1 || n_tokens > 4096) throw Error(ErrorCode::invalid_argument, "--tokens must be 1..4096");
  if (threads == 0) throw Error(ErrorCode::invalid_argument, "--threads must be at least 1");
  if (n_cols <= 0 || n_cols % 256 != 0)
    throw Error(ErrorCode::invalid_argument,
                "--cols " + std::to_string(n_cols) + " must be a positive multiple of 256");
  const auto types = parse_types(args["types"].as<std::string>());
  if (args.count("gpu")) {
    GpuBenchOptions o;
    o.types = types;
    o.n_cols = n_cols;
    o.target_bytes = args["gpu-mb"].as<size_t>() << 20;
    o.iterations = args["iters"].as<int>();
    if (o.target_bytes == 0 || o.iterations <= 0)
      throw Error(ErrorCode::invalid_argument, "--gpu-mb and --iters must be positive");
    bench_kernels_gpu(o);
    return 0;
  }

  std::vector<unsigned> thread_counts{1};
  if (threads > 1) thread_counts.push_back(threads);
  std::printf("kernels: %s; matrix %lld columns, ~%zu MiB per type; streaming buffer %zu MiB\n",
              kernels::cpu::best_kernels().isa, static_cast<long long>(n_cols), target >> 20,
              (2 * target) >> 20);

  std::vector<uint64_t> stream_buf(2 * target / sizeof(uint64_t), 1);
  for (unsigned n_threads : thread_counts) {
    kernels::ThreadPool pool(n_threads);
    const double mem_gbps = stream_read_gbps(stream_buf, pool, seconds);
    std::printf("\nthreads %u: streaming read %.2f GB/s\n", n_threads, mem_gbps);
    std::printf("%-8s %10s %10s %10s %10s %10s %8s %12s", "type", "rows", "MiB", "ms/matvec", "GB/s",
                "GFLOP/s", "ratio", "GB/cpu-s");
    if (n_tokens > 1) std::printf(" %10s", ("x" + std::to_string(n_tokens) + " gain").c_str());
    std::printf("\n");
    for (GgmlType type : types) {
      const BenchMatrix m = make_matrix(type, n_cols, target);
      std::vector<float> x(size_t(n_cols), 0.5f), y(size_t(m.w.n_rows));
      std::vector<std::byte> scratch(kernels::matmul_scratch_bytes(type, n_cols, 1, pool.size()));
      const CallTime t = time_per_call(seconds, [&] { kernels::matvec(m.w, x, y, scratch, pool); });
      const double gbps = double(m.bytes.size()) / t.wall / 1e9;
      const double gflops = 2.0 * double(m.w.n_rows) * double(n_cols) / t.wall / 1e9;
      // Bytes per CPU-second: on a shared machine this shows the kernel's own speed.
      const double cpu_gbps = t.cpu > 0 ? double(m.bytes.size()) / t.cpu / 1e9 : 0.0;
      std::printf("%-8s %10lld %10.1f %10.3f %10.2f %10.2f %8.2f %12.2f",
                  std::string(ggml_type_name(type)).c_str(), static_cast<long long>(m.w.n_rows),
                  double(m.bytes.size()) / (1 << 20), t.wall * 1e3, gbps, gflops, gbps / mem_gbps, cpu_gbps);
      if (n_tokens > 1) {
        // CPU time of n matvecs over that of one n-token matmul: noise from other tenants cancels.
        std::vector<float> xs(size_t(n_cols * n_tokens), 0.5f), ys(size_t(m.w.n_rows * n_tokens));
        std::vector<std::byte> batch_scratch(kernels::matmul_scratch_bytes(type, n_cols, n_tokens, pool.size()));
        const CallTime tb =
            time_per_call(seconds, [&] { kernels::matmul(m.w, xs, n_tokens, ys, batch_scratch, pool); });
        std::printf(" %10.2f", tb.cpu > 0 ? double(n_tokens) * t.cpu / tb.cpu : 0.0);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace sluice::tools
