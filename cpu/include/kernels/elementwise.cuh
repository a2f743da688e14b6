// Elementwise kernels, CPU build: shadows kernels/elementwise.cuh with its own launch_elementwise
// of the same kernel (kernels/elementwise_kernel.cuh). In the natural thread order a block runs as
// one loop over its elements, which g++ vectorises: no fiber, no threadIdx stored per thread, the
// body's tensors in registers. In the other orders, and under racecheck, each CUDA thread runs the body
// as elementwise_kernel on its own, as any kernel's thread does, so that those modes still
// permute the threads and see each one's accesses.
//
// The loop relies on the body's contract (kernels/elementwise.cuh): element i only, no barrier.
// On a GPU the threads are unordered, so a body that read another element's result would race;
// here the loop is told so (ivdep), which spares it run-time checks of the body's pointers.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "cpu/launch/launch_kernel.h"
#include "kernels/cuda_check.cuh"
#include "kernels/elementwise_kernel.cuh"

namespace cpu {

#ifndef CPU_RACECHECK
// body(i) for i in [begin, end). In chunks of 16 (two vectors of 8 floats, four of 4 doubles):
// g++ -O2 vectorises only a loop whose count is a multiple of the vector's, with no scalar
// remainder. flatten inlines the whole body, as a vectorised loop needs. The body is a copy: its
// pointers then stay in registers, where a reference's would be reloaded after each store (the
// build has -fno-strict-aliasing).
template <typename Body>
[[gnu::flatten]] void run_elements(const Body body, size_t begin, size_t end) {
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
#pragma GCC ivdep
    for (size_t k = 0; k < 16; ++k) body(i + k);
  }
  for (; i < end; ++i) body(i);
}
#endif

template <typename Body>
struct ElementwiseCall {
  Body body;
  size_t n;

  // The block's threads (cpu/launch/thread_starts.h), from the runner's position on.
  static void start(const void* c, ThreadStarts& starts) {
    const ElementwiseCall& call = *static_cast<const ElementwiseCall*>(c);
#ifndef CPU_RACECHECK
    if (!starts.order) {
      const size_t first = size_t(blockIdx.x) * starts.block_dim.x;
      run_elements(call.body, first + size_t(starts.next), std::min(call.n, first + size_t(starts.count)));
      starts.next = starts.count;
      return;
    }
#endif
    start_threads(starts, [&] { elementwise_kernel<Body>(call.body, call.n); });
  }
};

}  // namespace cpu

// Calls body(i) for every i in [0, n) on stream; n > 0.
template <typename Body>
void launch_elementwise(Body body, size_t n, cudaStream_t stream) {
  using Call = cpu::ElementwiseCall<Body>;
  const unsigned blocks = unsigned((n + kElementThreads - 1) / kElementThreads);
  cpu::launch_kernel(reinterpret_cast<const void*>(&elementwise_kernel<Body>), dim3(blocks), dim3(kElementThreads), 0,
                     stream, &Call::start, std::make_shared<const Call>(Call{body, n}));
  CUDA_CHECK(cudaGetLastError());
}
