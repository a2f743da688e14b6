// Check for cuBLAS calls: on failure, throw std::runtime_error with the status, the call and
// where it was made (as CUDA_CHECK in kernels/cuda_check.cuh does for the runtime, and why).
#pragma once
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("cuBLAS error: ") + cublasGetStatusString(status) + " (" +
                           cublasGetStatusName(status) + ") in " + call + " at " + file + ":" + std::to_string(line));
}
#define CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)
