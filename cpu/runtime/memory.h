// Device memory of the CPU build: every allocation belongs to the device that was current when it
// was made. With CUDA_CPU_STRICT_MEMORY=1 each device's allocations carry a memory protection key
// (pkeys(7)) that host threads may not use, and each stream worker may use only its own device's:
// a host dereference of a device pointer, or a kernel's access to another device's memory, faults
// and is reported naming the address, the allocation and what was running.
// Where the CPU or the kernel has no protection keys (some virtual machines), protection is by
// page instead, which is one setting for all threads: a device's memory is closed (PROT_NONE) while
// none of its stream operations is queued or running, and open while any is. That still catches
// the host reading device memory after a synchronisation (the usual mistake) and a kernel touching
// an idle device's memory, but not a host read while the device's work is in flight
// (docs/cpu-build.md).
#pragma once
#include <cstddef>
#include <cstdint>

namespace cpu {

struct Allocation {
  const char* start;
  size_t bytes;
  int device;
};

// The allocation that holds all of [p, p + bytes); false when none does (host memory, say).
bool find_allocation(const void* p, size_t bytes, Allocation& found);

// bytes on device (filled with 0xff bytes, NaN: fresh device memory is garbage), or nullptr
// when the device's memory (CUDA_CPU_DEVICE_MB) is used up.
void* allocate_device_memory(size_t bytes, int device);
// false: p is not the start of an allocation.
bool free_device_memory(void* p);

// Strict memory: the calling thread may touch `device`'s memory and no other device's. Stream
// workers call it before each operation; host threads never do, so they touch none.
void allow_device_access(int device);
// Strict memory without protection keys: the streams say when a device's first operation is
// queued (open) and when its last one has finished (closed). The caller holds the streams' mutex.
void set_device_memory_open(int device, bool open);

// Host memory from cudaMallocHost (page-locked on a GPU machine: copies to and from it are
// asynchronous, where pageable memory makes them wait).
void* allocate_pinned_memory(size_t bytes);
bool free_pinned_memory(void* p);
bool is_pinned(const void* p, size_t bytes);

struct DeviceMemory {
  size_t current_bytes = 0;  // allocated by cudaMalloc and not yet freed
  size_t peak_bytes = 0;     // the most current_bytes has been (since reset_peak)
  uint64_t allocations = 0;  // cudaMalloc calls that succeeded, ever
};
// Of the calling thread's current device.
DeviceMemory device_memory();
void reset_peak_device_memory();

}  // namespace cpu
