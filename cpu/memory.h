// Device memory of the CPU build: every allocation belongs to the device that was current when it
// was made. With CUDA_CPU_STRICT_MEMORY=1 each device's allocations carry a memory protection key
// (pkeys(7)) that host threads may not use, and each stream worker may use only its own device's:
// a host dereference of a device pointer, or a kernel's access to another device's memory, faults
// and is reported naming the address, the allocation and what was running.
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

// Host memory from cudaMallocHost (page-locked on a GPU machine: copies to and from it are
// asynchronous, where pageable memory makes them wait).
void* allocate_pinned_memory(size_t bytes);
bool free_pinned_memory(void* p);
bool is_pinned(const void* p, size_t bytes);

}  // namespace cpu
