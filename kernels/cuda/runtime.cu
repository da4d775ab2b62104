// CUDA runtime wrappers: device probe, RAII buffers, streams, events and copies.
#include "kernels/cuda/runtime.h"

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/check.cuh"

namespace sluice::kernels::cuda {

namespace {
cudaStream_t as_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
}  // namespace

std::optional<DeviceInfo> probe() {
  int count = 0;
  // No driver, no device, or a driver older than the runtime: all mean "no usable GPU".
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || cudaSetDevice(0) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  DeviceInfo info;
  info.ordinal = 0;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_bytes = prop.totalGlobalMem;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) info.free_bytes = free_bytes;
  else (void)cudaGetLastError();
  // Vendor formula: double data rate x memory clock x bus width. cudaDeviceProp lost the clock
  // field in CUDA 13; the attribute remains.
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess)
    info.peak_bandwidth_gbs = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;
  else
    (void)cudaGetLastError();
  return info;
}

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  SLUICE_CUDA_CHECK(cudaMalloc(&p, bytes));
  data_ = static_cast<std::byte*>(p);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // errors here would be sticky ones reported elsewhere
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

// ---- PinnedHostBuffer ----

PinnedHostBuffer::PinnedHostBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  SLUICE_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  data_ = static_cast<std::byte*>(p);
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_) cudaFreeHost(data_);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

// ---- HostRegistration ----

HostRegistration::HostRegistration(void* ptr, size_t bytes) {
  if (!ptr || bytes == 0) return;
  if (cudaHostRegister(ptr, bytes, cudaHostRegisterDefault) == cudaSuccess) {
    ptr_ = ptr;
    ok_ = true;
  } else {
    (void)cudaGetLastError();  // not fatal: copies from this memory are then synchronous
  }
}

HostRegistration::~HostRegistration() {
  if (ok_) cudaHostUnregister(ptr_);
}

// ---- Stream ----

Stream::Stream() {
  cudaStream_t s = nullptr;
  SLUICE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

Stream::~Stream() {
  if (handle_) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

void Stream::synchronize() { SLUICE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_))); }

// ---- Event ----

Event::Event() {
  cudaEvent_t e = nullptr;
  SLUICE_CUDA_CHECK(cudaEventCreate(&e));
  handle_ = e;
}

Event::~Event() {
  if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

void Event::record(Stream& stream) {
  SLUICE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), as_stream(stream)));
}

void Event::wait(Stream& stream) {
  SLUICE_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(handle_), 0));
}

bool Event::done() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (err == cudaErrorNotReady) return false;
  SLUICE_CUDA_CHECK(err);
  return true;
}

void Event::synchronize() { SLUICE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_))); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  SLUICE_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_), static_cast<cudaEvent_t>(handle_)));
  return ms;
}

// ---- copies ----

void copy_to_device(void* dst_device, const void* src_host, size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
}

void copy_to_host(void* dst_host, const void* src_device, size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(dst_host, src_device, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)));
}

}  // namespace sluice::kernels::cuda
