// Row-major batched GEMM over cuBLAS for the kernels' element types (double, float,
// bf16 storage with fp32 compute), used by the matmul and attention families. fp32 GEMMs use
// TF32 tensor cores when the handle's math mode allows it (the trainer's does unless --no-tf32).
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cublas_check.cuh"
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
// The handle must be in host pointer mode; it is bound to stream.
template <typename Element>
void gemm_batched(cublasHandle_t cublas, bool transpose_a, bool transpose_b, int M, int N, int K,
                  Compute<Element> alpha, const Element* a, long long stride_a, const Element* b,
                  long long stride_b, Compute<Element> beta, Element* c, long long stride_c, int batch,
                  cudaStream_t stream) {
  // A row-major matrix is its column-major transpose, so cuBLAS computes c^T = op(b)^T op(a)^T:
  // the operands swap places and keep their transpose flags; each leading dimension is the
  // stored row length.
  using Types = CublasTypes<Element>;
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
      b, Types::data, transpose_b ? K : N, stride_b, a, Types::data, transpose_a ? M : K, stride_a, &beta, c,
      Types::data, N, stride_c, batch, compute_type<Element>(cublas), CUBLAS_GEMM_DEFAULT));
}
