// The CPU build's kernel launch: queues a grid of blocks on a stream, each CUDA thread a fiber
// (cpu/block_scheduler.cpp). Called only by the launch helper in cpu/include/kernels/launch.cuh;
// configuration errors are reported through cudaGetLastError at once, a failure while the kernel
// runs later, as a sticky error (as on a GPU).
#pragma once
#include <cuda_runtime.h>

#include <memory>

namespace cpu {
// Runs kernel body for one thread; `call` holds the kernel pointer and its arguments.
using KernelBody = void (*)(const void* call);
void launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   KernelBody body, std::shared_ptr<const void> call);
}  // namespace cpu
