// The launch helper, CPU build. It shadows kernels/launch.cuh (the GPU build's,
// which uses <<< >>>) because cpu/include comes first on the CPU build's include
// path; both define the same launch(kernel, grid, block, shared_bytes, stream, args...)
// and DYNAMIC_SHARED.
//
// Here launch is a macro so that the kernel is known at compile time: it is wrapped in a
// lambda, which is empty (and its result a constant) when the kernel is named, and then the
// runner's loop is instantiated for that kernel with its body inlined (cpu/launch/launch_kernel.h).
// A kernel chosen at run time (a variable, a ?: on a variable) is called through its pointer.
// A kernel named with several template arguments needs parentheses: launch((k<A, B>), ...).
#pragma once
#include <cuda_runtime.h>
#include <memory>
#include <tuple>
#include <type_traits>
#include "cpu/launch/launch_kernel.h"
#include "kernels/cuda_check.cuh"

// Declares `name`, a T* to the block's dynamic shared memory (launch's shared_bytes).
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(cpu::dynamic_shared_memory)

#define launch(kernel, ...) ::cpu::launch_kernel_of([&] { return kernel; }, __VA_ARGS__)

namespace cpu {

template <typename Call>
struct KernelCall {
  // Runs the block's threads calling the kernel through the pointer held in the call.
  static void start_through_pointer(const void* c, ThreadStarts& starts) {
    const Call& call = *static_cast<const Call*>(c);
    start_threads(starts, [&] { std::apply(call.kernel, call.params); });
  }
  // Runs the block's threads calling `kernel` directly, its body inlined in the loop (flatten:
  // g++ -O2 would otherwise inline only small kernels).
  template <auto kernel>
  [[gnu::flatten]] static void start_known(const void* c, ThreadStarts& starts) {
    const auto params = static_cast<const Call*>(c)->params;  // each thread gets its own copies
    start_threads(starts, [&] { std::apply(kernel, params); });
  }
};

// launch_kernel_of, once the kernel's parameter types are deduced.
template <typename KernelOf, typename... Params, typename... Args>
void launch_kernel_pointer(KernelOf kernel_of, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t stream, Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  struct Call {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> params;
  };
  StartThreads start = &KernelCall<Call>::start_through_pointer;
  if constexpr (std::is_empty_v<KernelOf>) {
    constexpr auto known = kernel_of();
    start = &KernelCall<Call>::template start_known<known>;
  }
  auto call = std::make_shared<const Call>(Call{kernel, {args...}});
  launch_kernel(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream, start, std::move(call));
  CUDA_CHECK(cudaGetLastError());
}

// Queues the kernel that kernel_of() returns over grid x block threads with shared_bytes of
// dynamic shared memory on stream, then checks for launch errors, as
// kernel<<<grid, block, shared_bytes, stream>>>(args...) followed by
// CUDA_CHECK(cudaGetLastError()) does in the GPU build. The arguments are copied, as CUDA
// copies them at the launch.
template <typename KernelOf, typename... Args>
void launch_kernel_of(KernelOf kernel_of, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args... args) {
  using Kernel = decltype(kernel_of());
  static_assert(std::is_pointer_v<Kernel> && std::is_function_v<std::remove_pointer_t<Kernel>>,
                "launch: the first argument is not a kernel");
  launch_kernel_pointer(kernel_of, kernel_of(), grid, block, shared_bytes, stream, args...);
}

}  // namespace cpu
