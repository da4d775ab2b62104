// AVX2 kernels (defined in *_avx2.cpp, compiled with -mavx2 -mfma -mf16c). Same contracts as the
// scalar versions in scalar.h; never call them without checking the CPU (dispatch.cpp does).
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu::avx2 {

}  // namespace sluice::kernels::cpu::avx2
