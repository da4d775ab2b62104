// What the CPU offers, read from /proc/cpuinfo's flags line: independent of the kernels'
// dispatch (__builtin_cpu_supports in kernels/cpu/dispatch.cpp), so a dispatch that loses a
// level fails the suites that check it instead of leaving them nothing to check.
#pragma once

#include <fstream>
#include <string>

namespace sluice::test {

inline bool cpuinfo_has(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    return (line + " ").find(" " + flag + " ") != std::string::npos;
  }
  return false;
}

// The kernels' avx2 level: AVX2, FMA and F16C.
inline bool cpu_has_avx2_level() { return cpuinfo_has("avx2") && cpuinfo_has("fma") && cpuinfo_has("f16c"); }

// The kernels' avx512_vnni level: the avx2 level plus AVX-512 F/BW/VL/DQ and VNNI.
inline bool cpu_has_avx512_vnni_level() {
  return cpu_has_avx2_level() && cpuinfo_has("avx512f") && cpuinfo_has("avx512bw") && cpuinfo_has("avx512vl") &&
         cpuinfo_has("avx512dq") && cpuinfo_has("avx512_vnni");
}

}  // namespace sluice::test
