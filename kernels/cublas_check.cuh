// Check for cuBLAS calls: on failure, print the status, the call and where it was
// made, and exit (as CUDA_CHECK in kernels/cuda_check.cuh does for the runtime).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>

inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "cuBLAS error: %s (%s) in %s at %s:%d\n", cublasGetStatusString(status),
               cublasGetStatusName(status), call, file, line);
  std::exit(EXIT_FAILURE);
}
#define CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)
