// The i-quant codebooks for the CUDA dequantizers (dequant_iquants.cuh), with ONE source of the
// numbers: the CPU layer's constexpr tables (kernels/cpu/iq1_tables.h, iq2_tables.h,
// iq3_tables.h, iq_sign_tables.h). Nothing here is retyped.
//
// Device code cannot read a host array, so each grid gets a __device__ copy whose initializer is
// a constexpr copy of the CPU array: nvcc evaluates it at compile time and writes the entries
// into the device image (no cudaMemcpyToSymbol, no start-up step). The accessors below read that
// copy on the GPU and the CPU array itself on the host, which is what the host test
// (tests/test_cuda_iquant_host.cu) runs.
//
// Global memory, not __constant__: in the matvec kernel every lane of a warp looks up a different
// entry, and the constant cache serializes a warp's distinct addresses (up to 32 ways), while
// global loads of these small, hot tables (33 KiB in all) are served by L1.
//
// The signs are computed, not looked up: kSignsIq2xs[s] is s with bit 7 set to the parity of
// its 7 bits (ggml stores 7 sign bits and implies the eighth by even parity). The static_assert
// below checks that rule against every entry of the CPU table at compile time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/iq1_tables.h"
#include "kernels/cpu/iq2_tables.h"
#include "kernels/cpu/iq3_tables.h"
#include "kernels/cpu/iq_sign_tables.h"
#include "kernels/cuda/dequant_common.cuh"

namespace sluice::kernels::cuda::dq {

namespace cpu_tables = sluice::kernels::cpu;

// A by-value array, so a constexpr function can return a copy of a table.
template <class T, int N>
struct DeviceTable {
  T v[N];
};

template <class T, int N>
constexpr DeviceTable<T, N> device_copy(const T (&src)[N]) {
  DeviceTable<T, N> t{};
  for (int i = 0; i < N; ++i) t.v[i] = src[i];
  return t;
}

#if defined(__CUDACC__)
// static: each .cu file that uses a grid gets its own copy in its device image (no -rdc needed).
static __device__ const DeviceTable<uint64_t, 2048> kIq1sGridDevice = device_copy(cpu_tables::kIq1sGrid);
static __device__ const DeviceTable<uint64_t, 256> kIq2xxsGridDevice = device_copy(cpu_tables::kIq2xxsGrid);
static __device__ const DeviceTable<uint64_t, 512> kIq2xsGridDevice = device_copy(cpu_tables::kIq2xsGrid);
static __device__ const DeviceTable<uint64_t, 1024> kIq2sGridDevice = device_copy(cpu_tables::kIq2sGrid);
static __device__ const DeviceTable<uint32_t, 256> kIq3xxsGridDevice = device_copy(cpu_tables::kIq3xxsGrid);
static __device__ const DeviceTable<uint32_t, 512> kIq3sGridDevice = device_copy(cpu_tables::kIq3sGrid);
#endif

// Inside a __host__ __device__ function: the device copy when compiled for the GPU, the CPU
// table otherwise (each branch names only what its side can read).
#if defined(__CUDA_ARCH__)
#define SLUICE_IQ_LOOKUP(device_name, cpu_name, i) device_name.v[i]
#else
#define SLUICE_IQ_LOOKUP(device_name, cpu_name, i) cpu_tables::cpu_name[i]
#endif

// Entry i of each codebook: 8 bytes (IQ1, IQ2) or 4 bytes (IQ3), value j in byte j.
SLUICE_HD uint64_t iq1s_grid(uint32_t i) { return SLUICE_IQ_LOOKUP(kIq1sGridDevice, kIq1sGrid, i); }
SLUICE_HD uint64_t iq2xxs_grid(uint32_t i) { return SLUICE_IQ_LOOKUP(kIq2xxsGridDevice, kIq2xxsGrid, i); }
SLUICE_HD uint64_t iq2xs_grid(uint32_t i) { return SLUICE_IQ_LOOKUP(kIq2xsGridDevice, kIq2xsGrid, i); }
SLUICE_HD uint64_t iq2s_grid(uint32_t i) { return SLUICE_IQ_LOOKUP(kIq2sGridDevice, kIq2sGrid, i); }
SLUICE_HD uint32_t iq3xxs_grid(uint32_t i) { return SLUICE_IQ_LOOKUP(kIq3xxsGridDevice, kIq3xxsGrid, i); }
SLUICE_HD uint32_t iq3s_grid(uint32_t i) { return SLUICE_IQ_LOOKUP(kIq3sGridDevice, kIq3sGrid, i); }

#undef SLUICE_IQ_LOOKUP

// kSignsIq2xs[s] for the 7 stored sign bits s (< 128): bit j set means value j is negative.
SLUICE_HD constexpr uint32_t iq_signs(uint32_t s) {
  uint32_t p = s ^ (s >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return s | ((p & 1u) << 7);
}

constexpr bool iq_signs_match_cpu_table() {
  for (uint32_t s = 0; s < 128; ++s)
    if (iq_signs(s) != cpu_tables::kSignsIq2xs[s]) return false;
  return true;
}
static_assert(iq_signs_match_cpu_table(), "iq_signs() must reproduce ggml's ksigns_iq2xs");

}  // namespace sluice::kernels::cuda::dq
