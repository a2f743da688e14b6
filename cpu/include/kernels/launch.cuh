// The launch helper, CPU build. It shadows kernels/launch.cuh (the GPU build's,
// which uses <<< >>>) because cpu/include comes first on the CPU build's include
// path; both define the same launch() and DYNAMIC_SHARED.
#pragma once
#include <cuda_runtime.h>
#include <memory>
#include <tuple>
#include <type_traits>
#include "cpu/launch_kernel.h"
#include "kernels/cuda_check.cuh"

// Declares `name`, a T* to the block's dynamic shared memory (launch's shared_bytes).
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(cpu::dynamic_shared_memory)

// Queues kernel over grid x block threads with shared_bytes of dynamic shared memory on stream,
// then checks for launch errors, as kernel<<<grid, block, shared_bytes, stream>>>(args...)
// followed by CUDA_CHECK(cudaGetLastError()) does in the GPU build. The arguments are copied, as
// CUDA copies them at the launch.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  struct Call {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> params;
  };
  auto call = std::make_shared<const Call>(Call{kernel, {args...}});
  cpu::launch_kernel(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream,
                     [](const void* c) {
                       const Call& k = *static_cast<const Call*>(c);
                       std::apply(k.kernel, k.params);
                     },
                     std::move(call));
  CUDA_CHECK(cudaGetLastError());
}
