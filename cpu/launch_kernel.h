// The CPU build's kernel launch: runs a grid of blocks, each CUDA thread a fiber
// (cpu/block_scheduler.cpp). Called only by the launch helper in
// cpu/include/kernels/launch.cuh; errors are reported through cudaGetLastError.
#pragma once
#include <cuda_runtime.h>

namespace cpu {
// Runs kernel body for one thread; `call` holds the kernel pointer and its arguments.
using KernelBody = void (*)(const void* call);
void launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   KernelBody body, const void* call);
}  // namespace cpu
