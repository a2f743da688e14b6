// State of the CPU build's CUDA runtime shared by its files: errors, device memory.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cpu {

// Records e as the calling thread's last error (what cudaGetLastError returns) and returns it.
cudaError_t set_error(cudaError_t e);
// A failed kernel, as on a GPU, poisons the context: every later call returns e.
void set_sticky_error(cudaError_t e);
cudaError_t sticky_error();

// An API use outside what cpu/ implements: prints its name and aborts.
[[noreturn]] void unsupported(const char* what);

struct DeviceMemory {
  size_t current_bytes = 0;  // allocated by cudaMalloc and not yet freed
  size_t peak_bytes = 0;     // the most current_bytes has been (since reset_peak)
  uint64_t allocations = 0;  // cudaMalloc calls that succeeded, ever
};
// Of the calling thread's current device.
DeviceMemory device_memory();
void reset_peak_device_memory();

}  // namespace cpu
