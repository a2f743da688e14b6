// Row-major batched GEMM over cuBLAS for the kernels' element types (double, float,
// bf16 storage with fp32 compute), used by the matmul and attention families. fp32 GEMMs use
// TF32 tensor cores when the handle's math mode allows it (the trainer's does unless --no-tf32).
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <type_traits>

#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/element.cuh"

// cuBLAS's names for an element type and the precision its products accumulate in.
template <typename Element> struct CublasTypes;
template <> struct CublasTypes<double> {
  static constexpr cudaDataType data = CUDA_R_64F;
  static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_64F;
};
template <> struct CublasTypes<float> {
  static constexpr cudaDataType data = CUDA_R_32F;
  static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // true fp32 (see compute_type)
};
template <> struct CublasTypes<__nv_bfloat16> {
  static constexpr cudaDataType data = CUDA_R_16BF;
  static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};

// The GEMMs' workspace, which the caller allocates, so that the memory plan counts it
// (pipeline/memory_plan.h), and binds with bind_cublas: the size cuBLAS's documentation
// recommends for a workspace of the user's (cublasSetWorkspace), 32 MiB on Hopper (compute
// capability 9) and newer, 4 MiB on the others; of the current device.
inline size_t cublas_workspace_bytes() {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return size_t(major >= 9 ? 32 : 4) << 20;
}

// Binds the handle to stream and then to workspace (bytes of device memory, 256-byte aligned as
// cudaMalloc's are). In this order, and once: cublasSetStream resets the handle's workspace to the
// library's own pool, memory the plan does not hold. So the GEMMs do not set the stream; they
// check it (gemm_batched).
inline void bind_cublas(cublasHandle_t cublas, cudaStream_t stream, void* workspace, size_t bytes) {
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  CUBLAS_CHECK(cublasSetWorkspace(cublas, workspace, bytes));
}

// The compute type of a GEMM on the handle. fp32 on a handle in CUBLAS_TF32_TENSOR_OP_MATH
// ("allow accelerating single precision routines using TF32 tensor cores", cublas_api.h) asks
// for CUBLAS_COMPUTE_32F_FAST_TF32 ("allows down-converting inputs to TF32": 10 explicit
// mantissa bits and fp32's exponent, products accumulated in fp32), as llm.c does, rather than
// leaving the choice to the mode. The setting lives in the caller's handle: no global state.
template <typename Element>
cublasComputeType_t compute_type(cublasHandle_t cublas) {
  if constexpr (std::is_same_v<Element, float>) {
    cublasMath_t mode;
    CUBLAS_CHECK(cublasGetMathMode(cublas, &mode));
    // The mode may carry the flag CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION besides.
    if ((int(mode) & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) == int(CUBLAS_TF32_TENSOR_OP_MATH))
      return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CublasTypes<Element>::compute;
}

// For i in [0, batch): c[i] (M, N) = alpha op(a[i]) (M, K) op(b[i]) (K, N) + beta c[i],
// every matrix row-major and dense, op = transpose when transpose_a / transpose_b, so a
// is stored (M, K) or (K, M), b (K, N) or (N, K). Matrix i starts i * stride_* elements
// after matrix 0. beta = 0 ignores c's old contents; bf16 c is rounded once, at the end.
// The handle must be in host pointer mode and bound to stream (bind_cublas).
template <typename Element>
void gemm_batched(cublasHandle_t cublas, bool transpose_a, bool transpose_b, int M, int N, int K,
                  Compute<Element> alpha, const Element* a, long long stride_a, const Element* b,
                  long long stride_b, Compute<Element> beta, Element* c, long long stride_c, int batch,
                  cudaStream_t stream) {
  // A row-major matrix is its column-major transpose, so cuBLAS computes c^T = op(b)^T op(a)^T:
  // the operands swap places and keep their transpose flags; each leading dimension is the
  // stored row length.
  using Types = CublasTypes<Element>;
  cudaStream_t bound;
  CUBLAS_CHECK(cublasGetStream(cublas, &bound));
  if (bound != stream)
    throw std::logic_error("gemm_batched: the cuBLAS handle is bound to another stream than the GEMM's (bind_cublas)");
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
      b, Types::data, transpose_b ? K : N, stride_b, a, Types::data, transpose_a ? M : K, stride_a, &beta, c,
      Types::data, N, stride_c, batch, compute_type<Element>(cublas), CUBLAS_GEMM_DEFAULT));
}
