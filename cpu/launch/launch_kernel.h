// The CPU build's kernel launch: queues a grid of blocks on a stream, each CUDA thread a fiber
// (cpu/launch/block_scheduler.cpp). Called only by the launch helper in cpu/include/kernels/launch.cuh;
// configuration errors are reported through cudaGetLastError at once, a failure while the kernel
// runs later, as a sticky error (as on a GPU).
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "cpu/launch/thread_starts.h"

namespace cpu {

void launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   StartThreads start_threads, std::shared_ptr<const void> call);

}  // namespace cpu
