// The project's device allocations: model/, pipeline/, trainer/ and comm/ allocate and free
// device memory only through device_alloc and device_free, which check the CUDA call (an error
// exits, as CUDA_CHECK) and keep process-wide counts. Those counts are what the project holds,
// to the byte, in either build: cudaMemGetInfo cannot say that on a GPU, where the driver
// rounds allocations up to its granularity (2 MiB), serves small ones from memory it already
// holds, and reports the CUDA context's, cuBLAS's, NCCL's and other processes' memory too.
// Tests assert "nothing allocated inside a step" as an unchanged allocation count, which also
// catches an allocation freed again before the step ends.
#pragma once
#include <cstddef>
#include <cstdint>

struct DeviceMemoryCounts {
  size_t bytes_in_use;   // allocated by device_alloc and not yet freed
  size_t peak_bytes;     // the largest bytes_in_use so far in the process
  uint64_t allocations;  // device_alloc calls ever made: only grows
};

// cudaMalloc of `bytes`, counted. Device memory is not cleared.
void* device_alloc_bytes(size_t bytes);
// count elements of T.
template <typename T>
T* device_alloc(size_t count) {
  return static_cast<T*>(device_alloc_bytes(count * sizeof(T)));
}
// cudaFree of a device_alloc pointer, uncounted; nullptr does nothing (as cudaFree). A pointer
// device_alloc did not give is an error: one line naming it, then exit.
void device_free(void* pointer);

DeviceMemoryCounts device_memory_counts();
// From now on peak_bytes is the largest bytes_in_use since this call (a test's own peak).
void reset_device_memory_peak();
