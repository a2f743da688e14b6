// The CPU build's cuBLAS handle (cpu/blas/cublas_context.cpp): its device, stream, workspace and
// modes, which the GEMMs (cpu/blas/cublas.cpp) read. cuBLAS's header only declares the handle's
// type; each implementation defines it.
#pragma once
#include <cublas_v2.h>

#include <cstddef>

// The workspace: the caller's (cublasSetWorkspace) until cublasSetStream resets it to the
// library's own pool, as cuBLAS's documentation says cublasSetStream does "unconditionally". A
// GPU's library holds that pool in device memory it allocates itself; here it is allocated, on the
// device's counts, at the first GEMM that uses it (kLibraryPoolBytes, the size cuBLAS's
// documentation gives its default pool), so that a GEMM outside the caller's workspace shows as
// device memory the caller did not allocate.
struct cublasContext {
  int device;  // current when the handle was made
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;  // the caller's; nullptr: the library's pool
  size_t workspace_bytes = 0;
  void* library_pool = nullptr;  // allocated at its first use, freed with the handle
};


namespace cpu {

// The device's memory of cuBLAS's own pool (the documentation's default workspace pool size).
constexpr size_t kLibraryPoolBytes = size_t(4) << 20;

// Whether the handle has a workspace for a GEMM: the caller's, or the library's pool, allocated at
// the first GEMM that needs it (false: the device's memory is used up).
bool has_gemm_workspace(cublasHandle_t handle);

}  // namespace cpu
