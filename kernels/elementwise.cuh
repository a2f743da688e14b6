// Elementwise kernels: a body called once per element, one CUDA thread per element, in blocks of
// kElementThreads. A body is a struct holding its tensors with
//   __device__ void operator()(size_t i) const
// which reads and writes element i only (no other element's, no shared memory, no barrier): so
// the threads are independent, as a build that runs them as a plain loop relies on (the CPU
// build shadows this file with cpu/include/kernels/elementwise.cuh).
#pragma once
#include <cuda_runtime.h>

#include "kernels/elementwise_kernel.cuh"
#include "kernels/launch.cuh"

// Calls body(i) for every i in [0, n) on stream; n > 0.
template <typename Body>
void launch_elementwise(Body body, size_t n, cudaStream_t stream) {
  const unsigned blocks = unsigned((n + kElementThreads - 1) / kElementThreads);
  launch(elementwise_kernel<Body>, dim3(blocks), dim3(kElementThreads), 0, stream, body, n);
}
