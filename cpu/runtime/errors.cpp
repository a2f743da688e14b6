// The calling thread's last CUDA error and the context's sticky one (cpu/runtime/errors.h).
#include "cpu/runtime/errors.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace cpu {
namespace {

thread_local cudaError_t last_error = cudaSuccess;
std::atomic<cudaError_t> sticky{cudaSuccess};

}  // namespace

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}
void set_sticky_error(cudaError_t e) {
  sticky = e;
  last_error = e;
}
cudaError_t sticky_error() { return sticky.load(); }

void unsupported(const char* what) {
  std::fprintf(stderr, "cpu: %s is not supported by the CPU build\n", what);
  std::abort();
}

cudaError_t take_last_error() {
  const cudaError_t e = sticky_error() != cudaSuccess ? sticky_error() : last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t peek_last_error() { return sticky_error() != cudaSuccess ? sticky_error() : last_error; }

}  // namespace cpu
