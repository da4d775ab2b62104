#include "core/gpu/vram_cost_model.h"

#include <cstdio>

#include "common/error.h"

namespace sluice::core {

VramCostModel::VramCostModel(const TierRates& rates) : rates_(rates) {
  if (!(rates.h2d_bytes_per_s > 0) || !(rates.cpu_bytes_per_s > 0))
    throw Error(ErrorCode::invalid_argument, "VRAM cost model needs positive H2D and CPU rates (got " +
                                                 std::to_string(rates.h2d_bytes_per_s) + " and " +
                                                 std::to_string(rates.cpu_bytes_per_s) + " bytes/s)");
  if (rates_.gpu_bytes_per_s < 0) rates_.gpu_bytes_per_s = 0;
  if (rates_.copy_latency_s < 0) rates_.copy_latency_s = 0;
}

double VramCostModel::copy_up_seconds(uint64_t bytes) const {
  const double b = static_cast<double>(bytes);
  double s = b / rates_.h2d_bytes_per_s + rates_.copy_latency_s;
  if (rates_.gpu_bytes_per_s > 0) s += b / rates_.gpu_bytes_per_s;
  return s;
}

double VramCostModel::cpu_seconds(uint64_t bytes, int64_t n_tokens) const {
  return static_cast<double>(n_tokens < 1 ? 1 : n_tokens) * static_cast<double>(bytes) / rates_.cpu_bytes_per_s;
}

bool VramCostModel::gpu_product(uint64_t bytes, int64_t n_tokens) const {
  double gpu = rates_.copy_latency_s;
  if (rates_.gpu_bytes_per_s > 0) gpu += static_cast<double>(bytes) / rates_.gpu_bytes_per_s;
  return gpu <= cpu_seconds(bytes, n_tokens);
}

std::string VramCostModel::describe(uint64_t typical_bytes) const {
  int64_t from = 0;
  for (int64_t n = 1; n <= 4096 && from == 0; n = n < 64 ? n + 1 : n * 2)
    if (copy_up(typical_bytes, n)) from = n;
  char buf[200];
  std::snprintf(buf, sizeof buf, "H2D %.1f GB/s, CPU matvec %.1f GB/s, GPU %.0f GB/s: ", rates_.h2d_bytes_per_s / 1e9,
                rates_.cpu_bytes_per_s / 1e9, rates_.gpu_bytes_per_s / 1e9);
  std::string s = buf;
  if (from == 0) return s + "VRAM misses are computed on the CPU";
  return s + "a VRAM miss is copied up from " + std::to_string(from) + " token" + (from > 1 ? "s" : "") + " per expert";
}

}  // namespace sluice::core
