// NCCL_CHECK(call): on failure, print NCCL's error, its last error message, the call and
// where it was made, and exit.
#pragma once
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

inline void nccl_check(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  std::fprintf(stderr, "NCCL error: %s (%s) in %s at %s:%d\n", ncclGetErrorString(result), ncclGetLastError(nullptr),
               call, file, line);
  std::exit(EXIT_FAILURE);
}
#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)
