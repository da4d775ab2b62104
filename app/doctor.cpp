#include "app/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/units.h"
#include "core/gguf/gguf.h"
#include "core/gguf/model_summary.h"
#include "io/bandwidth_probe.h"
#include "io/file_probe.h"
#include "io/pread_reader.h"
#include "io/system_probe.h"
#include "kernels/cpu/dispatch.h"

namespace sluice::core {

namespace {

// The hit rate's high end, relative to the cache share (see doctor.h).
constexpr double kReuseFactor = 1.5;
constexpr double kMaxHit = 0.95;
// Memory doctor leaves to the OS, the page cache and other processes.
constexpr double kHeadroom = 0.10;

std::vector<std::string> cpu_flags_of_interest() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::stringstream ss(line.substr(line.find(':') + 1));
    std::vector<std::string> have, out;
    for (std::string f; ss >> f;) have.push_back(f);
    for (const char* want : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni"})
      if (std::find(have.begin(), have.end(), want) != have.end()) out.emplace_back(want);
    return out;
  }
  return {};
}

std::string gib(uint64_t b) { return human_bytes(b); }

}  // namespace

DoctorRecommendation recommend(const ModelSummary& model, uint64_t usable) {
  DoctorRecommendation rec;
  rec.usable_bytes = usable;
  if (model.file_bytes <= usable) {
    rec.in_core = true;
    rec.budget_bytes = model.file_bytes;
    rec.cache_experts = 1;
    return rec;
  }
  rec.budget_bytes = usable;
  const double left = static_cast<double>(usable) - static_cast<double>(model.resident_bytes);
  rec.cache_experts =
      model.routed_expert_bytes ? std::clamp(left / static_cast<double>(model.routed_expert_bytes), 0.0, 1.0) : 1.0;
  return rec;
}

void expect_decode(const ModelSummary& model, double disk_gbps, DoctorRecommendation& rec) {
  rec.disk_gbps = disk_gbps;
  const double share = rec.cache_experts;
  rec.tok_s_low = decode_ceiling_tok_s(model, disk_gbps, std::min(share, 0.999));
  rec.tok_s_high = decode_ceiling_tok_s(model, disk_gbps, std::min({kMaxHit, kReuseFactor * share, 0.999}));
}

const char* to_string(CheckStatus s) {
  switch (s) {
    case CheckStatus::ok: return "ok";
    case CheckStatus::warn: return "warn";
    case CheckStatus::fail: return "fail";
  }
  return "?";
}

bool DoctorReport::ok() const {
  return std::none_of(checks.begin(), checks.end(), [](const DoctorCheck& c) { return c.status == CheckStatus::fail; });
}

DoctorReport run_doctor(const DoctorOptions& o) {
  DoctorReport r;
  const io::UringSupport uring = io::probe_uring();
  r.checks.push_back({"io_uring", uring.ok ? CheckStatus::ok : CheckStatus::warn, uring.detail});

  std::optional<ModelSummary> model;
  if (!o.model_path.empty()) {
    io::OpenedFile f = io::open_for_read(o.model_path, true);
    ::close(f.fd);
    r.checks.push_back({"o_direct", f.direct ? CheckStatus::ok : CheckStatus::warn,
                        f.direct ? "the model's file system takes O_DIRECT (alignment " + std::to_string(f.alignment) + " B)"
                                 : f.notice});
    io::PreadReader reader(o.model_path);
    model = summarize(GgufFile::parse(reader));
  }

  // Memory: what can be used, and the budget that follows.
  const io::CgroupMemory cg = io::cgroup_memory();
  const uint64_t available = io::mem_available_bytes();
  uint64_t usable = available;
  if (cg.limit_bytes) usable = std::min(usable, *cg.limit_bytes);
  usable = static_cast<uint64_t>(static_cast<double>(usable) * (1.0 - kHeadroom));
  const uint64_t budget = o.budget_bytes;

  if (model) r.recommendation = recommend(*model, usable);
  const uint64_t planned = budget ? budget : (r.recommendation ? r.recommendation->budget_bytes : 0);

  // memlock: registration pins the expert arena (about the budget less resident weights) plus staging.
  const io::MemlockLimit ml = io::memlock_limit();
  if (ml.cap_ipc_lock || !ml.soft_bytes) {
    r.checks.push_back({"memlock", CheckStatus::ok,
                        ml.cap_ipc_lock ? "CAP_IPC_LOCK (root): registered buffers are not limited" : "RLIMIT_MEMLOCK unlimited"});
  } else {
    uint64_t pinned = 4u << 20;
    if (model && planned > model->resident_bytes) pinned += planned - model->resident_bytes;
    const bool enough = *ml.soft_bytes >= pinned;
    r.checks.push_back({"memlock", enough ? CheckStatus::ok : CheckStatus::warn,
                        "RLIMIT_MEMLOCK " + gib(*ml.soft_bytes) + (model ? ", registration needs about " + gib(pinned) : "") +
                            (enough ? "" : ": the expert arena will not be registered (reads still work, with more CPU "
                                           "per read); raise it with ulimit -l or run as root")});
  }

  if (!cg.limit_bytes) {
    r.checks.push_back({"cgroup", CheckStatus::ok, "no memory cgroup limit; MemAvailable " + gib(available)});
  } else {
    const std::string where = "cgroup v" + std::to_string(cg.version) + " limit " + gib(*cg.limit_bytes) + " (" + cg.path + ")";
    if (budget && budget > *cg.limit_bytes) {
      r.checks.push_back({"cgroup", CheckStatus::fail, where + " is below --budget " + gib(budget) +
                                                           ": the kernel would reclaim or kill before the budget is reached"});
    } else {
      r.checks.push_back({"cgroup", CheckStatus::ok, where + (budget ? ", above --budget " + gib(budget) : "")});
    }
  }

  r.kernel_level = kernels::cpu::best_kernels().isa;
  r.cpu_features = cpu_flags_of_interest();
  std::string features;
  for (const auto& f : r.cpu_features) features += (features.empty() ? "" : " ") + f;
  r.checks.push_back({"cpu", r.kernel_level == std::string("scalar") ? CheckStatus::warn : CheckStatus::ok,
                      "kernels " + r.kernel_level + "; CPU has " + (features.empty() ? "no AVX2" : features)});

  if (model && o.probe_seconds > 0) {
    io::BandwidthOptions probe;
    probe.read_size = std::max<uint64_t>(4096, model->expert_shard_bytes ? model->expert_shard_bytes : 8u << 20);
    probe.read_size = std::min<uint64_t>(probe.read_size, 64u << 20);
    probe.depths = {1, 8, 32};
    probe.seconds_per_depth = o.probe_seconds / 3;
    probe.max_bytes_per_depth = 2ull << 30;
    const io::BandwidthReport bw = io::probe_bandwidth(o.model_path, probe);
    char line[160];
    std::snprintf(line, sizeof line, "%.2f GB/s random %s reads at depth %u (%s%s)", bw.max_gb_per_s,
                  human_bytes(probe.read_size).c_str(), bw.best_depth, bw.backend.c_str(), bw.direct ? ", O_DIRECT" : ", buffered");
    r.checks.push_back({"disk", CheckStatus::ok, line});
    expect_decode(*model, bw.max_gb_per_s, *r.recommendation);
  }
  return r;
}

}  // namespace sluice::core
