// Installs the AVX2 kernels into a dispatch table (called only when the CPU has AVX2+FMA+F16C).
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/dispatch.h"

namespace sluice::kernels::cpu {

void add_avx2_kernels(KernelTable& t) {
  t.isa = "avx2";
  (void)t;
}

}  // namespace sluice::kernels::cpu
