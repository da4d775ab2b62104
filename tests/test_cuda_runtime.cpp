// The CUDA runtime wrappers: probe, device and pinned buffers, copies, streams and events.
// Without a GPU (or in a build without CUDA) the cases skip.
#include <doctest/doctest.h>

#if SLUICE_HAVE_CUDA

#include <cstring>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/runtime.h"
#include "tests/cuda_test_util.h"

namespace cu = sluice::kernels::cuda;

TEST_CASE("cuda probe describes the device (or reports none)") {
  const auto dev = cu::probe();
  if (!dev) {
    MESSAGE("no CUDA device: skipped");
    return;
  }
  MESSAGE(dev->name << " sm_" << dev->sm_major << dev->sm_minor << ", " << dev->multiprocessors << " SMs, "
                    << (dev->total_bytes >> 30) << " GiB, peak " << dev->peak_bandwidth_gbs << " GB/s");
  CHECK(!dev->name.empty());
  CHECK(dev->sm_major >= 5);
  CHECK(dev->multiprocessors > 0);
  CHECK(dev->total_bytes > 0);
  CHECK(dev->free_bytes <= dev->total_bytes);
  CHECK(dev->peak_bandwidth_gbs > 100);
}

TEST_CASE("cuda buffers round-trip bytes through the device with events ordering the copies") {
  if (sluice::test::skip_without_gpu()) return;
  constexpr size_t kBytes = 3 << 20;
  cu::Stream a, b;
  cu::PinnedHostBuffer src(kBytes), dst(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src.data()[i] = std::byte(i * 131 + 7);
  cu::DeviceBuffer d1(kBytes), d2(kBytes);
  REQUIRE(d1.size() == kBytes);
  cu::Event start, copied, end;
  start.record(a);
  cu::copy_to_device(d1.data(), src.data(), kBytes, a);
  copied.record(a);
  copied.wait(b);  // b's copy starts after a's upload
  cu::copy_device_to_device(d2.data(), d1.data(), kBytes, b);
  cu::copy_to_host(dst.data(), d2.data(), kBytes, b);
  end.record(b);
  end.synchronize();
  CHECK(end.done());
  CHECK(std::memcmp(src.data(), dst.data(), kBytes) == 0);
  CHECK(copied.elapsed_ms_since(start) >= 0.0f);

  // Moves hand the allocation over.
  cu::DeviceBuffer moved(std::move(d1));
  CHECK(d1.data() == nullptr);
  CHECK(moved.size() == kBytes);

  // Registered pageable memory copies too.
  std::vector<std::byte> pageable(kBytes);
  cu::HostRegistration reg(pageable.data(), pageable.size());
  MESSAGE("cudaHostRegister " << (reg.ok() ? "ok" : "refused"));
  cu::copy_to_host(pageable.data(), moved.data(), kBytes, a);
  a.synchronize();
  CHECK(std::memcmp(src.data(), pageable.data(), kBytes) == 0);
}

TEST_CASE("cuda allocation failures are sluice errors naming the call") {
  if (sluice::test::skip_without_gpu()) return;
  const auto dev = cu::probe();
  try {
    cu::DeviceBuffer huge(dev->total_bytes * 4);
    FAIL("allocating 4x the device memory succeeded");
  } catch (const sluice::Error& e) {
    CHECK(std::string(e.what()).find("cudaMalloc") != std::string::npos);
    CHECK(e.code() == sluice::ErrorCode::budget);
  }
  cu::DeviceBuffer ok(1 << 20);  // the failure left no sticky error behind
  CHECK(ok.data() != nullptr);
}

#endif  // SLUICE_HAVE_CUDA
