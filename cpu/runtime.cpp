// The CUDA runtime API on the CPU: device memory (counted), copies, streams, events,
// errors and device properties. Work is synchronous: a stream is a name, every
// operation has finished when its call returns, and an event records when it was reached.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cpu/runtime_state.h"
#include "cpu/settings.h"

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point when;
  bool recorded;
};

namespace cpu {
namespace {

thread_local cudaError_t last_error = cudaSuccess;
std::atomic<cudaError_t> sticky{cudaSuccess};

std::mutex memory_mutex;
std::map<const char*, size_t> allocations;  // start -> bytes
DeviceMemory memory;

// Whether [p, p + bytes) lies inside one device allocation.
bool is_device_range(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.upper_bound(static_cast<const char*>(p));
  if (it == allocations.begin()) return false;
  --it;
  const char* c = static_cast<const char*>(p);
  return c >= it->first && c + bytes <= it->first + it->second;
}

cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (bytes == 0) return cudaSuccess;
  if ((dst_device && !is_device_range(dst, bytes)) || (src_device && !is_device_range(src, bytes))) {
    std::fprintf(stderr, "cpu: cudaMemcpy of %zu bytes: a device side is not inside one cudaMalloc allocation\n",
                 bytes);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}
void set_sticky_error(cudaError_t e) {
  sticky = e;
  last_error = e;
}
cudaError_t sticky_error() { return sticky.load(); }

void unsupported(const char* what) {
  std::fprintf(stderr, "cpu: %s is not supported by the CPU build\n", what);
  std::abort();
}

DeviceMemory device_memory() {
  std::lock_guard<std::mutex> lock(memory_mutex);
  return memory;
}
void reset_peak_device_memory() {
  std::lock_guard<std::mutex> lock(memory_mutex);
  memory.peak_bytes = memory.current_bytes;
}

}  // namespace cpu

using cpu::set_error;

#define RETURN_IF_STICKY \
  if (cpu::sticky_error() != cudaSuccess) return set_error(cpu::sticky_error())

cudaError_t cudaMalloc(void** p, size_t bytes) {
  RETURN_IF_STICKY;
  if (!p) return set_error(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(cpu::memory_mutex);
  if (cpu::memory.current_bytes + bytes > cpu::settings().device_bytes) return set_error(cudaErrorMemoryAllocation);
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* memory = std::aligned_alloc(256, rounded);
  if (!memory) return set_error(cudaErrorMemoryAllocation);
  std::memset(memory, 0xff, rounded);  // fresh device memory is garbage: here, NaN
  cpu::allocations[static_cast<const char*>(memory)] = bytes;
  cpu::memory.current_bytes += bytes;
  cpu::memory.peak_bytes = std::max(cpu::memory.peak_bytes, cpu::memory.current_bytes);
  ++cpu::memory.allocations;
  *p = memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(cpu::memory_mutex);
  auto it = cpu::allocations.find(static_cast<const char*>(p));
  if (it == cpu::allocations.end()) return set_error(cudaErrorInvalidValue);
  cpu::memory.current_bytes -= it->second;
  cpu::allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::malloc(bytes ? bytes : 1);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  RETURN_IF_STICKY;
  if (cudaError_t e = cpu::check_copy(dst, src, bytes, kind)) return set_error(e);
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  RETURN_IF_STICKY;
  if (bytes && !cpu::is_device_range(p, bytes)) return set_error(cudaErrorInvalidValue);
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const size_t total = cpu::settings().device_bytes;
  *total_bytes = total;
  *free_bytes = total - cpu::device_memory().current_bytes;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new CUstream_st{0};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  RETURN_IF_STICKY;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  return event ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st{{}, false};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  event->when = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end || !start->recorded || !end->recorded) return set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  RETURN_IF_STICKY;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  cudaError_t e = cpu::sticky_error() != cudaSuccess ? cpu::sticky_error() : cpu::last_error;
  cpu::last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  return cpu::sticky_error() != cudaSuccess ? cpu::sticky_error() : cpu::last_error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "CPU (CUDA threads as fibers)");
  prop->totalGlobalMem = cpu::settings().device_bytes;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = cpu::settings().block_threads;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
  }
}
