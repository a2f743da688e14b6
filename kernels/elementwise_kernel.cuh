// The kernel of elementwise bodies (kernels/elementwise.cuh): one thread per element, in blocks of
// kElementThreads. Its own header, so that both builds' launch_elementwise (the CPU build's is
// cpu/include/kernels/elementwise.cuh) launch this one definition.
#pragma once
#include <cuda_runtime.h>

constexpr int kElementThreads = 256;

template <typename Body>
__global__ void elementwise_kernel(Body body, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) body(i);
}
