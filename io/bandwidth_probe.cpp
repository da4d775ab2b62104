#include "io/bandwidth_probe.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "common/error.h"
#include "io/aligned_buffer.h"
#include "io/uring_reader.h"

namespace sluice::io {

BandwidthReport probe_bandwidth(const std::string& path, const BandwidthOptions& options) {
  if (options.read_size == 0) throw Error(ErrorCode::invalid_argument, "--read-size must be positive");
  if (options.depths.empty()) throw Error(ErrorCode::invalid_argument, "no queue depths to measure");
  unsigned max_depth = *std::max_element(options.depths.begin(), options.depths.end());
  if (max_depth == 0 || max_depth > 4096) {
    throw Error(ErrorCode::invalid_argument, "queue depths must be in [1, 4096], got " + std::to_string(max_depth));
  }

  IoOptions io = options.io;
  io.queue_depth = max_depth;
  OpenedReader opened = open_reader(path, io);
  Reader& reader = *opened.reader;

  BandwidthReport report;
  report.path = path;
  report.file_size = reader.file_size();
  report.backend = std::string(reader.backend());
  report.notices = opened.notices;
  if (auto* uring = dynamic_cast<UringReader*>(&reader)) report.direct = uring->direct();

  constexpr uint64_t kAlign = 4096;
  uint64_t read_size = std::min(options.read_size, report.file_size & ~(kAlign - 1));
  if (read_size == 0) {
    throw Error(ErrorCode::invalid_argument, "'" + path + "' is too small to measure (" +
                                                 std::to_string(report.file_size) + " bytes)");
  }
  read_size = (read_size + kAlign - 1) & ~(kAlign - 1);
  report.read_size = read_size;
  // Offsets on read_size boundaries when the file holds several, else on 4 KiB boundaries.
  uint64_t step = report.file_size / read_size >= 4 ? read_size : kAlign;
  uint64_t positions = (report.file_size - read_size) / step + 1;

  report.misaligned = options.misaligned;
  const uint64_t shift = options.misaligned ? 32 : 0;  // GGUF's alignment, not the device's
  const uint64_t stride = read_size + (options.misaligned ? kAlign : 0);
  uint64_t buffers = std::max<uint64_t>(1, std::min<uint64_t>(max_depth, options.max_buffer_bytes / stride));
  AlignedBuffer memory(buffers * stride);
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<uint64_t> pick(0, positions - 1);

  std::vector<ReadRequest> batch;
  std::vector<Completion> done(max_depth);
  for (unsigned depth : options.depths) {
    DepthResult r;
    r.depth = depth;
    uint64_t issued = 0;
    auto issue = [&](unsigned count) {
      batch.clear();
      for (unsigned i = 0; i < count; ++i, ++issued) {
        std::byte* dst = memory.data() + (issued % buffers) * stride + shift;
        batch.push_back(ReadRequest{pick(rng) * step, read_size, dst, issued});
      }
      reader.submit(batch);
    };
    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    auto deadline = start + std::chrono::duration<double>(options.seconds_per_depth);
    bool stopping = false;
    issue(depth);
    while (reader.in_flight() > 0) {
      size_t n = reader.reap(done, 1);
      for (size_t i = 0; i < n; ++i) {
        if (done[i].result < 0) {
          throw Error(ErrorCode::io_error, describe_read_failure(path, done[i].request.offset,
                                                                 done[i].request.length, done[i].result));
        }
        ++r.reads;
        r.bytes += done[i].request.length;
      }
      if (!stopping) {
        stopping = clock::now() >= deadline ||
                   (options.max_bytes_per_depth && (issued * read_size) >= options.max_bytes_per_depth);
        if (!stopping) issue(static_cast<unsigned>(n));
      }
    }
    r.seconds = std::chrono::duration<double>(clock::now() - start).count();
    r.gb_per_s = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0;
    if (r.gb_per_s > report.max_gb_per_s) {
      report.max_gb_per_s = r.gb_per_s;
      report.best_depth = depth;
    }
    report.depths.push_back(r);
  }
  return report;
}

}  // namespace sluice::io
