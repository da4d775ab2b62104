// What the operating system lets sluice's IO do, checked without reading a model: whether
// io_uring can be set up (and if not, the likely reason), the locked-memory limit that buffer
// registration counts against, and the memory limit of the cgroup this process runs in. Used by
// `sluice doctor`; each check returns facts and a one-line explanation, never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sluice::io {

struct UringSupport {
  bool ok = false;
  std::string detail;  // kernel version when ok; otherwise why it failed and what to try
};
UringSupport probe_uring();

struct MemlockLimit {
  std::optional<uint64_t> soft_bytes;  // nullopt: unlimited
  bool cap_ipc_lock = false;           // root or CAP_IPC_LOCK: registration is not limited
};
MemlockLimit memlock_limit();

struct CgroupMemory {
  std::optional<uint64_t> limit_bytes;  // nullopt: no limit (or none found)
  int version = 0;                      // 1 or 2; 0 when no memory controller was found
  std::string path;                     // the file the limit was read from
};
CgroupMemory cgroup_memory();

// /proc/meminfo MemAvailable (0 when unreadable).
uint64_t mem_available_bytes();

}  // namespace sluice::io
