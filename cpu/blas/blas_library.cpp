// Loads OpenBLAS with the kernel set the settings name (cpu/blas/blas_library.h).
#include "cpu/blas/blas_library.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cpu/runtime/settings.h"

namespace cpu {
namespace {

// Sets an environment variable for the duration of a scope, then restores it.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedVariable() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "cpu: OpenBLAS: %s\n", what.c_str());
  std::exit(EXIT_FAILURE);
}

template <typename Function>
Function symbol(void* library, const char* name) {
  void* found = dlsym(library, name);
  if (!found) fail(std::string("libopenblas.so.0 has no ") + name);
  return reinterpret_cast<Function>(found);
}

BlasLibrary load() {
  const std::string& core = settings().blas_core;
  // OpenBLAS reads both variables while it loads: the kernel set, and its own threads, which
  // stay at one (cpu/blas/cublas.cpp shares a GEMM out by panels instead: their split is fixed).
  std::optional<ScopedVariable> core_type;
  if (core != "auto") core_type.emplace("OPENBLAS_CORETYPE", core.c_str());
  ScopedVariable threads("OPENBLAS_NUM_THREADS", "1");
  void* library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!library) fail(std::string("cannot load libopenblas.so.0: ") + dlerror());
  BlasLibrary blas;
  blas.sgemm = symbol<decltype(&cblas_sgemm)>(library, "cblas_sgemm");
  blas.dgemm = symbol<decltype(&cblas_dgemm)>(library, "cblas_dgemm");
  blas.core = symbol<char* (*)()>(library, "openblas_get_corename")();
  blas.set_num_threads = symbol<decltype(&openblas_set_num_threads)>(library, "openblas_set_num_threads");
  blas.set_num_threads(1);
  if (core != "auto" && strcasecmp(blas.core.c_str(), core.c_str()) != 0)
    fail("CUDA_CPU_BLAS_CORE=" + core + " but OpenBLAS runs its " + blas.core +
         " kernels (this CPU lacks their instructions, or OpenBLAS does not know the name); "
         "CUDA_CPU_BLAS_CORE=auto takes OpenBLAS's choice");
  return blas;
}

}  // namespace

const BlasLibrary& blas_library() {
  static const BlasLibrary library = load();
  return library;
}

}  // namespace cpu
