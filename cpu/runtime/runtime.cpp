// The CUDA runtime API on the CPU: device memory, copies and memsets with CUDA's host
// synchronisation rules, device properties. Streams, events and devices are in
// cpu/runtime/streams.cpp, allocations in cpu/runtime/memory.cpp, errors in cpu/runtime/errors.cpp.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu/runtime/call_counts.h"
#include "cpu/runtime/devices.h"
#include "cpu/runtime/memory.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/settings.h"
#include "cpu/runtime/streams.h"

namespace cpu {
namespace {

// Where a copy's side lies: host memory (pageable or pinned), or one allocation of `device`.
enum class Side { pageable, pinned, device };

// Checks a copy's device sides against the allocations and the stream's device: each must lie
// inside one allocation of that device. (CUDA would route a copy between two devices through
// peer access; the project never copies between devices, so the CPU build refuses it.)
cudaError_t check_side(const char* function, const char* name, const void* p, size_t bytes, bool device_side,
                       int device, Side& side) {
  if (!device_side) {
    side = is_pinned(p, bytes) ? Side::pinned : Side::pageable;
    return cudaSuccess;
  }
  side = Side::device;
  Allocation a;
  if (!find_allocation(p, bytes, a)) {
    std::fprintf(stderr, "cpu: %s of %zu bytes: %s %p is not inside one cudaMalloc allocation\n", function, bytes,
                 name, p);
    return cudaErrorInvalidValue;
  }
  if (a.device != device) {
    std::fprintf(stderr, "cpu: %s on device %d: %s %p is memory of device %d\n", function, device, name, p,
                 a.device);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

bool is_host_to_device(cudaMemcpyKind kind) { return kind == cudaMemcpyHostToDevice; }
bool writes_device(cudaMemcpyKind kind) { return kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice; }
bool reads_device(cudaMemcpyKind kind) { return kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice; }

// Above this a copy from pageable host memory goes through the driver's pinned staging buffers
// in pieces, and CUDA may synchronise it with its stream ("API synchronization behavior": "the
// driver may synchronize with the stream and stage the copy into pinned memory").
constexpr size_t kPageableCopyWithoutWaitBytes = 64 << 10;

// A copy queued on stream, with CUDA's rules for when the host may go on (the CUDA Runtime API's
// "API synchronization behavior"): from pageable host memory the source is staged first, so the
// host may change it at once, but above 64 KB the call waits for the copy; to pageable host
// memory the call returns once the copy is done; a synchronous cudaMemcpy returns once the copy
// is done except between two device buffers and from pageable memory of at most 64 KB; copies
// with pinned memory and between device buffers run in stream order without the host waiting.
cudaError_t copy(const char* function, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                 cudaStream_t stream, bool synchronous) {
  if (sticky_error() != cudaSuccess) return set_error(sticky_error());
  if (kind == cudaMemcpyDefault) unsupported((std::string(function) + " with cudaMemcpyDefault").c_str());
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice) return set_error(cudaErrorInvalidMemcpyDirection);
  if (bytes == 0) return cudaSuccess;
  const int device = stream_device(stream);
  Side dst_side, src_side;
  if (cudaError_t e = check_side(function, "dst", dst, bytes, writes_device(kind), device, dst_side)) return set_error(e);
  if (cudaError_t e = check_side(function, "src", src, bytes, reads_device(kind), device, src_side)) return set_error(e);
  if (kind == cudaMemcpyHostToHost) {
    count_host_wait();
    synchronize_stream(stream);
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  std::function<void()> work = [dst, src, bytes] { std::memmove(dst, src, bytes); };
  if (is_host_to_device(kind) && src_side == Side::pageable) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    work = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  }
  const Ticket ticket = enqueue(stream, function, std::move(work));
  const bool staged = is_host_to_device(kind) && src_side == Side::pageable;
  const bool staged_in_pieces = staged && bytes > kPageableCopyWithoutWaitBytes;
  const bool host_waits =
      staged_in_pieces || (synchronous ? !(kind == cudaMemcpyDeviceToDevice || staged) : dst_side == Side::pageable);
  if (host_waits) {
    count_host_wait();
    wait_for(ticket);
    if (sticky_error() != cudaSuccess) return set_error(sticky_error());
  }
  return cudaSuccess;
}

cudaError_t memset(const char* function, void* p, int value, size_t bytes, cudaStream_t stream) {
  if (sticky_error() != cudaSuccess) return set_error(sticky_error());
  if (bytes == 0) return cudaSuccess;
  Side side;
  if (cudaError_t e = check_side(function, "devPtr", p, bytes, true, stream_device(stream), side)) return set_error(e);
  enqueue(stream, function, [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

// A device or pinned allocation, or a free of one, is an implicit synchronisation on a GPU (the
// CUDA Programming Guide, "Implicit Synchronization"): the host first waits for the device's work.
void synchronise_for(void (*count)()) {
  count();
  count_host_wait();
  synchronize_device(current_device());
}

}  // namespace


}  // namespace cpu

using cpu::set_error;

#define RETURN_IF_STICKY \
  if (cpu::sticky_error() != cudaSuccess) return set_error(cpu::sticky_error())

cudaError_t cudaMalloc(void** p, size_t bytes) {
  RETURN_IF_STICKY;
  if (!p) return set_error(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  cpu::synchronise_for(cpu::count_allocation);
  *p = cpu::allocate_device_memory(bytes, cpu::current_device());
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  cpu::synchronise_for(cpu::count_free);
  return cpu::free_device_memory(p) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (!p) return set_error(cudaErrorInvalidValue);
  cpu::synchronise_for(cpu::count_allocation);
  *p = cpu::allocate_pinned_memory(bytes);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags) {
  if (flags != cudaHostAllocDefault) cpu::unsupported("cudaHostAlloc with flags other than cudaHostAllocDefault");
  return cudaMallocHost(p, bytes);
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  cpu::synchronise_for(cpu::count_free);
  return cpu::free_pinned_memory(p) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cpu::copy("cudaMemcpy", dst, src, bytes, kind, nullptr, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return cpu::copy("cudaMemcpyAsync", dst, src, bytes, kind, stream, false);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return cpu::memset("cudaMemset", p, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  return cpu::memset("cudaMemsetAsync", p, value, bytes, stream);
}

// A driver hands out device memory in pages of 2 MiB and serves small allocations from pages it
// holds, so the free figure moves in steps of 2 MiB or not at all; the CPU build reports it so.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return set_error(cudaErrorInvalidValue);
  constexpr size_t granularity = size_t(2) << 20;
  const size_t total = cpu::settings().device_bytes;
  const size_t used = (cpu::device_memory().current_bytes + granularity - 1) / granularity * granularity;
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() { return cpu::take_last_error(); }
cudaError_t cudaPeekAtLastError() { return cpu::peek_last_error(); }

// Of a visible device (cpu/runtime/devices.h), whose UUID says which of the node's devices it is.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return set_error(cudaErrorInvalidValue);
  if (device < 0 || device >= cpu::visible_device_count()) return set_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "CPU (CUDA threads as fibers)");
  const std::array<char, 16> uuid = cpu::device_uuid(device);
  std::memcpy(prop->uuid.bytes, uuid.data(), uuid.size());
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

// The attributes the project asks for; any other aborts with its number (cpu::unsupported).
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!value) return set_error(cudaErrorInvalidValue);
  if (device < 0 || device >= cpu::visible_device_count()) return set_error(cudaErrorInvalidDevice);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, device);
  switch (attribute) {
    case cudaDevAttrComputeCapabilityMajor: *value = prop.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = prop.minor; return cudaSuccess;
    default: cpu::unsupported(("cudaDeviceGetAttribute " + std::to_string(int(attribute))).c_str());
  }
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
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
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    default: return "unknown error";
  }
}
