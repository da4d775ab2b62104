#include "io/system_probe.h"

#include <liburing.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sluice::io {

namespace {

std::string kernel_release() {
  utsname u{};
  return uname(&u) == 0 ? std::string(u.release) : std::string("unknown");
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "max" (v2) or a number; values near 2^63 (v1's "no limit") count as no limit.
std::optional<uint64_t> parse_limit(const std::string& text) {
  if (text.empty() || text == "max") return std::nullopt;
  try {
    const uint64_t v = std::stoull(text);
    if (v >= (1ull << 62)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

UringSupport probe_uring() {
  io_uring ring{};
  const int r = io_uring_queue_init(8, &ring, 0);
  if (r == 0) {
    io_uring_queue_exit(&ring);
    return {true, "kernel " + kernel_release()};
  }
  std::string why = std::strerror(-r);
  if (r == -ENOSYS) {
    why += ": this kernel (" + kernel_release() + ") has no io_uring, or a seccomp filter (containers) blocks it";
  } else if (r == -EPERM) {
    const std::string disabled = first_line("/proc/sys/kernel/io_uring_disabled");
    why += disabled.empty() || disabled == "0"
               ? ": blocked by a seccomp profile or security module (e.g. a container runtime's default)"
               : ": disabled by sysctl kernel.io_uring_disabled=" + disabled;
  } else if (r == -ENOMEM) {
    why += ": RLIMIT_MEMLOCK too low for the ring (raise ulimit -l)";
  }
  return {false, why + "; sluice falls back to pread (--io pread)"};
}

MemlockLimit memlock_limit() {
  MemlockLimit m;
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) m.soft_bytes = rl.rlim_cur;
  // CAP_IPC_LOCK in the effective set: the kernel does not count registered pages against the limit.
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) == 0) m.cap_ipc_lock = (data[0].effective >> CAP_IPC_LOCK) & 1u;
  return m;
}

CgroupMemory cgroup_memory() {
  CgroupMemory c;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // v1: "ID:memory:/path" (the controller list may hold several names); v2: "0::/path".
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::stringstream names(controllers);
    std::string name;
    bool memory = false;
    while (std::getline(names, name, ',')) memory |= name == "memory";
    if (memory) {
      for (const std::string& base : {"/sys/fs/cgroup/memory" + path, std::string("/sys/fs/cgroup/memory")}) {
        const std::string file = base + "/memory.limit_in_bytes";
        const std::string v = first_line(file);
        if (v.empty()) continue;
        c.version = 1;
        c.path = file;
        c.limit_bytes = parse_limit(v);
        return c;
      }
    } else if (controllers.empty() && line.rfind("0::", 0) == 0) {
      for (const std::string& base : {"/sys/fs/cgroup" + path, std::string("/sys/fs/cgroup")}) {
        const std::string file = base + "/memory.max";
        const std::string v = first_line(file);
        if (v.empty()) continue;
        c.version = 2;
        c.path = file;
        c.limit_bytes = parse_limit(v);
        return c;
      }
    }
  }
  return c;
}

uint64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoull(line.substr(13)) * 1024;
  }
  return 0;
}

}  // namespace sluice::io
