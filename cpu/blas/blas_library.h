// OpenBLAS with the same kernels on every machine. OpenBLAS picks its kernel set (its "core") from
// the CPU's model when it loads, and a GEMM's bits depend on that set: on a CPU model it does not
// know it falls back to old SSE3 kernels (docs/cpu-build.md, "GEMMs"). So the CPU build loads it
// itself, after naming the set that settings().blas_core asks for, and checks that it got it.
#pragma once
#include <cblas.h>

#include <string>

namespace cpu {

struct BlasLibrary {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_dgemm) dgemm;
  // OpenBLAS's own threads: 1 in the CPU build; tools/gpt2_step_bench raises it to measure the
  // machine's sgemm rate.
  decltype(&openblas_set_num_threads) set_num_threads;
  std::string core;  // the kernel set OpenBLAS runs (openblas_get_corename)
};

// Loaded on first use; a library that cannot load, or loads another kernel set than the one
// asked for, ends the process with one line saying which.
const BlasLibrary& blas_library();

}  // namespace cpu
