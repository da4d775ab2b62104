// The resident weights and the expert cache arena are advised for transparent huge pages
// (common/huge_pages.h). Without the advice the expert arena took 4 KiB pages whenever free memory
// was fragmented (THP defrag in `madvise` mode): on the 8.5 GiB K2-shaped file at
// --cache-experts 100% only the 2.1 GiB weight arena got huge pages, the 6.4 GiB expert arena none.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cache/arena.h"
#include "common/huge_pages.h"
#include "common/weight_arena.h"

namespace {

// The VmFlags line of the mapping in /proc/self/smaps that holds `address` ("" if none does).
std::string vm_flags_at(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  REQUIRE_MESSAGE(smaps.good(), "cannot read /proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool advised(const std::string& vm_flags) { return vm_flags.find(" hg") != std::string::npos; }

void* first_huge_page_in(const std::byte* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>((a + sluice::kHugePageBytes - 1) / sluice::kHugePageBytes * sluice::kHugePageBytes);
}

}  // namespace

TEST_CASE("the expert cache arena and the weight arena are advised for huge pages") {
  REQUIRE_MESSAGE(std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                  "this kernel has no transparent huge pages: the advice under test cannot exist");
  const uint64_t bytes = 16 * sluice::kHugePageBytes;

  sluice::cache::Arena experts(bytes);
  const std::string expert_flags = vm_flags_at(first_huge_page_in(experts.data()));
  INFO("expert arena: " << expert_flags);
  CHECK(advised(expert_flags));

  auto weights = sluice::allocate_weight_arena(bytes, "test weights");
  const std::string weight_flags = vm_flags_at(first_huge_page_in(weights.get()));
  INFO("weight arena: " << weight_flags);
  CHECK(advised(weight_flags));
}

TEST_CASE("advise_huge_pages advises only the whole 2 MiB pages inside its range") {
  // Advice on a partly covered 2 MiB page would let the kernel back bytes outside the range
  // (another allocation's) with a huge page.
  const uint64_t H = sluice::kHugePageBytes;
  void* mapped = ::mmap(nullptr, 10 * H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mapped != MAP_FAILED);
  auto* base = static_cast<std::byte*>(first_huge_page_in(static_cast<std::byte*>(mapped)));
  sluice::advise_huge_pages(base + H / 2, 3 * H);  // covers [0.5 H, 3.5 H): whole pages 1 and 2
  CHECK_FALSE(advised(vm_flags_at(base)));
  CHECK(advised(vm_flags_at(base + H)));
  CHECK(advised(vm_flags_at(base + 2 * H + H / 2)));
  CHECK_FALSE(advised(vm_flags_at(base + 3 * H)));
  ::munmap(mapped, 10 * H);
}
