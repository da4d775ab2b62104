// Host-side interface of the CUDA kernel layer. Plain C++: no CUDA headers, so core/ and tools/
// include it in every build. The definitions live in kernels/cuda/*.cu and exist only when the
// build found nvcc (SLUICE_HAVE_CUDA=1); callers guard their use with `#if SLUICE_HAVE_CUDA`.
//
// Device memory is always plain cudaMalloc (never managed memory). Every call that can fail throws
// sluice::Error naming the CUDA call and cudaGetErrorString's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace sluice::kernels::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  double peak_bandwidth_gbs = 0;  // from memory clock and bus width, as the vendor computes it
};

// The first usable GPU, or nullopt when there is no device or no driver (never throws).
std::optional<DeviceInfo> probe();

// RAII cudaMalloc'd bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// RAII page-locked host memory (cudaHostAlloc), for asynchronous copies.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Registers existing host memory as page-locked for the object's lifetime (cudaHostRegister);
// lets copies from the RAM shard arena run asynchronously. Falls back silently (ok() false).
class HostRegistration {
 public:
  HostRegistration(void* ptr, size_t bytes);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  bool ok() const { return ok_; }

 private:
  void* ptr_ = nullptr;
  bool ok_ = false;
};

// RAII cudaStream_t (non-blocking) and cudaEvent_t, passed around as opaque handles.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return handle_; }  // cudaStream_t
  void synchronize();

 private:
  void* handle_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream& stream);
  void wait(Stream& stream);  // stream waits for this event (cudaStreamWaitEvent)
  bool done() const;          // cudaEventQuery
  void synchronize();
  float elapsed_ms_since(const Event& start) const;

 private:
  void* handle_ = nullptr;
};

// Asynchronous copies on `stream` (synchronous w.r.t. the host when the host side is pageable).
void copy_to_device(void* dst_device, const void* src_host, size_t bytes, Stream& stream);
void copy_to_host(void* dst_host, const void* src_device, size_t bytes, Stream& stream);
void copy_device_to_device(void* dst, const void* src, size_t bytes, Stream& stream);

}  // namespace sluice::kernels::cuda
