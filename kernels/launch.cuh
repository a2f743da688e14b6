// The launch helper: the one way kernels are started, so that the same .cu files
// also compile with g++ (the CPU build shadows this file with
// cpu/include/kernels/launch.cuh, which defines the same launch and DYNAMIC_SHARED).
#pragma once
#include <cuda_runtime.h>
#include "kernels/cuda_check.cuh"

// Declares `name`, a T* to the block's dynamic shared memory (launch's shared_bytes).
#define DYNAMIC_SHARED(T, name)                                   \
  extern __shared__ __align__(16) unsigned char name##_bytes_[]; \
  T* name = reinterpret_cast<T*>(name##_bytes_)

// Runs kernel over grid x block threads with shared_bytes of dynamic shared memory
// on stream, then checks for launch errors (bad configuration, too much shared memory).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  kernel<<<grid, block, shared_bytes, stream>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}
