// NCCL_CHECK(call): on failure, throw std::runtime_error with NCCL's error, its last error
// message, the call and where it was made (kernels/cuda_check.cuh says why a throw).
#pragma once
#include <nccl.h>

#include <stdexcept>
#include <string>

inline void nccl_check(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL error: ") + ncclGetErrorString(result) + " (" +
                           ncclGetLastError(nullptr) + ") in " + call + " at " + file + ":" + std::to_string(line));
}
#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)
