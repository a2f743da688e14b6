// What the cuBLAS tests share (tests/cublas_test.cu, which runs in both builds, and
// tests/cpu/cublas_status_test.cu, the CPU build's answers that cuBLAS does not document): one
// GEMM as cuBLAS takes it, the odd-sized GEMM of the tests, and the status of every GEMM
// function the project calls on it.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/device_buffer.h"

namespace cublas_calls {

// One GEMM as cuBLAS takes it, column-major: C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C.
struct Gemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  int lda, ldb, ldc;
  double alpha, beta;
};
// Rows and columns of A and B as stored, before op.
inline int rows_a(const Gemm& g) { return g.transa == CUBLAS_OP_N ? g.m : g.k; }
inline int cols_a(const Gemm& g) { return g.transa == CUBLAS_OP_N ? g.k : g.m; }
inline int rows_b(const Gemm& g) { return g.transb == CUBLAS_OP_N ? g.k : g.n; }
inline int cols_b(const Gemm& g) { return g.transb == CUBLAS_OP_N ? g.n : g.k; }

// The GEMM of these tests: odd sizes, every leading dimension 3 rows more than needed.
inline Gemm odd_gemm(cublasOperation_t transa, cublasOperation_t transb, double beta = -1.25) {
  Gemm g{transa, transb, 5, 7, 3, 0, 0, 0, 0.75, beta};
  g.lda = rows_a(g) + 3;
  g.ldb = rows_b(g) + 3;
  g.ldc = g.m + 3;
  return g;
}

inline const std::pair<cublasOperation_t, cublasOperation_t> kTransposePairs[] = {
    {CUBLAS_OP_N, CUBLAS_OP_N}, {CUBLAS_OP_N, CUBLAS_OP_T}, {CUBLAS_OP_T, CUBLAS_OP_N}, {CUBLAS_OP_T, CUBLAS_OP_T}};

inline std::string describe(const Gemm& g, int batch) {
  const char* transa = g.transa == CUBLAS_OP_N ? "N" : "T";
  const char* transb = g.transb == CUBLAS_OP_N ? "N" : "T";
  return "transa " + std::string(transa) + ", transb " + transb + ", batch " + std::to_string(batch);
}

// The status of each GEMM call on g (batch_count for the strided batches), with buffers
// large enough for odd_gemm; an invalid call must not touch them.
inline std::vector<std::pair<const char*, cublasStatus_t>> status_of_every_gemm(cublasHandle_t handle, const Gemm& g,
                                                                         int batch_count) {
  DeviceBuffer<float> A(100), B(100), C(100);
  DeviceBuffer<double> A64(100), B64(100), C64(100);
  DeviceBuffer<__nv_bfloat16> A16(100), B16(100), C16(100);
  const float alpha = float(g.alpha), beta = float(g.beta);
  const double alpha64 = g.alpha, beta64 = g.beta;
  const cublasOperation_t ta = g.transa, tb = g.transb;
  const int m = g.m, n = g.n, k = g.k, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  return {
      {"cublasSgemm", cublasSgemm(handle, ta, tb, m, n, k, &alpha, A.data(), lda, B.data(), ldb, &beta, C.data(), ldc)},
      {"cublasDgemm", cublasDgemm(handle, ta, tb, m, n, k, &alpha64, A64.data(), lda, B64.data(), ldb, &beta64,
                                  C64.data(), ldc)},
      {"cublasSgemmStridedBatched",
       cublasSgemmStridedBatched(handle, ta, tb, m, n, k, &alpha, A.data(), lda, 0, B.data(), ldb, 0, &beta, C.data(),
                                 ldc, 0, batch_count)},
      {"cublasDgemmStridedBatched",
       cublasDgemmStridedBatched(handle, ta, tb, m, n, k, &alpha64, A64.data(), lda, 0, B64.data(), ldb, 0, &beta64,
                                 C64.data(), ldc, 0, batch_count)},
      {"cublasGemmEx fp32", cublasGemmEx(handle, ta, tb, m, n, k, &alpha, A.data(), CUDA_R_32F, lda, B.data(),
                                         CUDA_R_32F, ldb, &beta, C.data(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT)},
      {"cublasGemmEx bf16", cublasGemmEx(handle, ta, tb, m, n, k, &alpha, A16.data(), CUDA_R_16BF, lda, B16.data(),
                                         CUDA_R_16BF, ldb, &beta, C16.data(), CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT)},
      {"cublasGemmStridedBatchedEx fp64",
       cublasGemmStridedBatchedEx(handle, ta, tb, m, n, k, &alpha64, A64.data(), CUDA_R_64F, lda, 0, B64.data(),
                                  CUDA_R_64F, ldb, 0, &beta64, C64.data(), CUDA_R_64F, ldc, 0, batch_count,
                                  CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT)},
  };
}

}  // namespace cublas_calls
