// The threads that share a GEMM in the CPU build. cpu/blas/cublas.cpp cuts each GEMM into tiles fixed
// by its shape alone and runs every tile as its own single-threaded OpenBLAS call, so a result's
// bits do not depend on how many threads run the tiles or which thread runs which.
#pragma once
#include <functional>

namespace cpu {

// Runs task(0) ... task(count - 1), each exactly once, on the calling thread and up to
// settings().blas_threads - 1 helpers, and returns when all have run. Tasks must not depend on
// each other. The helpers run them as part of the caller's stream operation (its name, and
// under strict memory its device's memory and no other). The caller runs whatever no helper
// takes, so it finishes even where no helper can run (in a child process after fork, say).
// The pool's size is the setting's at the first call.
void run_blas_tasks(int count, const std::function<void(int)>& task);

}  // namespace cpu
