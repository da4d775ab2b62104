// sluice doctor: can this machine run a model out of core, and how should it be run?
//
// Checks, each with a status and one line of explanation:
//   io_uring       can a ring be set up (else why: kernel, seccomp/container, sysctl)
//   o_direct       does the model's file system take O_DIRECT reads (else buffered + dropped pages)
//   memlock        RLIMIT_MEMLOCK against what buffer registration pins (the expert arena of the
//                  recommended budget plus the reader's staging); root/CAP_IPC_LOCK is unlimited
//   cgroup         the memory cgroup's limit against the budget (--budget) or the recommendation
//   cpu            the CPU's SIMD features and the kernel level that will run (scalar, avx2, ...)
//   disk           a short random-read probe of the model file (io::probe_bandwidth)
// With a model it recommends a budget and --cache-experts from the memory it can use
// (min(MemAvailable, cgroup limit) less 10%), and the disk-bound decode range
//   ceiling(hit = cache share)  ..  ceiling(hit = min(0.95, 1.5 x cache share))
// where ceiling is inspect's decode_ceiling_tok_s; the low end assumes every expert is equally
// likely, the high end the reuse LRU found on the recorded FLAME-MoE trace (35.5% hits at a 25%
// cache, about 1.4x the share; README Results).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::core {

enum class CheckStatus { ok, warn, fail };
const char* to_string(CheckStatus s);

struct DoctorCheck {
  std::string name;    // io_uring, o_direct, memlock, cgroup, cpu, disk
  CheckStatus status = CheckStatus::ok;
  std::string detail;  // one line
};

struct DoctorOptions {
  std::string model_path;    // empty: machine checks only (no o_direct, disk or recommendation)
  uint64_t budget_bytes = 0; // 0: none given (the recommendation is checked instead)
  double probe_seconds = 3;  // disk probe, split over three queue depths
};

struct DoctorRecommendation {
  uint64_t usable_bytes = 0;     // memory doctor plans with
  uint64_t budget_bytes = 0;     // recommended --budget
  double cache_experts = 0;      // the share of routed experts that budget caches (0..1)
  bool in_core = false;          // the whole file fits: --in-core
  double disk_gbps = 0;          // from the probe
  double tok_s_low = 0, tok_s_high = 0;  // disk-bound decode range at that share
};

struct DoctorReport {
  std::vector<DoctorCheck> checks;
  std::string kernel_level;           // the ISA the CPU kernels dispatch to
  std::vector<std::string> cpu_features;
  std::optional<DoctorRecommendation> recommendation;  // with a model
  bool ok() const;  // no check failed
};

DoctorReport run_doctor(const DoctorOptions& options);

struct ModelSummary;
// The budget and cache share for a model given the memory that can be used (disk figures unset).
DoctorRecommendation recommend(const ModelSummary& model, uint64_t usable_bytes);
// The decode range at that share for a disk rate (sets disk_gbps, tok_s_low, tok_s_high).
void expect_decode(const ModelSummary& model, double disk_gbps, DoctorRecommendation& rec);

}  // namespace sluice::core
