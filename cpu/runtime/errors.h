// The CPU build's CUDA errors, which every part of cpu/ sets: the calling thread's last error and
// the context's sticky error. Its own file, so that the runtime API (cpu/runtime/runtime.cpp) and
// the streams (cpu/runtime/streams.cpp) both use it without calling each other.
#pragma once
#include <cuda_runtime.h>

namespace cpu {

// Records e as the calling thread's last error (what cudaGetLastError returns) and returns it.
cudaError_t set_error(cudaError_t e);
// A failed kernel, as on a GPU, poisons the context: every later call returns e.
void set_sticky_error(cudaError_t e);
cudaError_t sticky_error();
// cudaGetLastError: the sticky error if any, else the thread's last error, which it clears.
cudaError_t take_last_error();
// cudaPeekAtLastError: the same, clearing nothing.
cudaError_t peek_last_error();

// An API use outside what cpu/ implements: prints its name and aborts.
[[noreturn]] void unsupported(const char* what);

}  // namespace cpu
