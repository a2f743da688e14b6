// cuBLAS on the CPU, over OpenBLAS: the GEMMs the project calls (Sgemm, Dgemm, their strided batches, and
// GemmEx / GemmStridedBatchedEx for fp32, bf16 and fp64), with cuBLAS's column-major
// semantics and argument checks, and fp32 inputs rounded to TF32 where cuBLAS may use it. A GEMM
// is queued on the handle's stream (alpha and beta are read at the call, as host pointers are);
// its matrices must be memory of the handle's device. The operands' conversions (bf16 widening,
// TF32 rounding) are in cpu/blas/gemm_operands.h. Any other use aborts with its name (cpu::unsupported).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu/blas/blas_library.h"
#include "cpu/blas/blas_threads.h"
#include "cpu/blas/cublas_context.h"
#include "cpu/runtime/call_counts.h"
#include "cpu/blas/gemm_operands.h"
#include "cpu/runtime/memory.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/streams.h"

namespace {

// One GEMM as cuBLAS describes it, column-major:
// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C, with op(X) = X or X^T.
struct Shape {
  cublasOperation_t transa, transb;
  int m, n, k;
  int lda, ldb, ldc;
};
// Rows and columns of A and B as stored, before op.
int rows_a(const Shape& s) { return s.transa == CUBLAS_OP_N ? s.m : s.k; }
int cols_a(const Shape& s) { return s.transa == CUBLAS_OP_N ? s.k : s.m; }
int rows_b(const Shape& s) { return s.transb == CUBLAS_OP_N ? s.k : s.n; }
int cols_b(const Shape& s) { return s.transb == CUBLAS_OP_N ? s.n : s.k; }

bool is_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// cuBLAS's checks of a GEMM call: the handle, the arguments, then an earlier failed
// kernel (which, as on a GPU, fails all later work).
cublasStatus_t check_gemm(cublasHandle_t handle, const Shape& s, const void* alpha, const void* beta,
                          const void* C, int batch_count) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!is_op(s.transa) || !is_op(s.transb) || s.m < 0 || s.n < 0 || s.k < 0 || batch_count < 0 ||
      s.lda < std::max(1, rows_a(s)) || s.ldb < std::max(1, rows_b(s)) || s.ldc < std::max(1, s.m) ||
      alpha == nullptr || beta == nullptr || (C == nullptr && s.m > 0 && s.n > 0))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (cpu::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

// Bytes a batch of (rows, cols) matrices spans in memory, from its first element to its last.
size_t matrix_span(int rows, int cols, int ld, long long stride, int batch_count, size_t element_bytes) {
  if (rows == 0 || cols == 0 || batch_count == 0) return 0;
  return (size_t(batch_count - 1) * size_t(std::max(0LL, stride)) + size_t(cols - 1) * ld + rows) * element_bytes;
}

// A GEMM's operands must be memory of the handle's device. On a GPU another device's or host
// memory makes the kernel fault: the context fails (cudaErrorIllegalAddress) and so does the call.
// Then the GEMM is queued on the handle's stream.
cublasStatus_t queue_gemm(const char* function, cublasHandle_t handle, const Shape& s, const void* A,
                          long long stride_a, const void* B, long long stride_b, const void* C, long long stride_c,
                          int batch_count, size_t ab_bytes, size_t c_bytes, std::function<void()> work) {
  const struct {
    const char* name;
    const void* p;
    size_t bytes;
  } operands[] = {{"A", A, matrix_span(rows_a(s), cols_a(s), s.lda, stride_a, batch_count, ab_bytes)},
                  {"B", B, matrix_span(rows_b(s), cols_b(s), s.ldb, stride_b, batch_count, ab_bytes)},
                  {"C", C, matrix_span(s.m, s.n, s.ldc, stride_c, batch_count, c_bytes)}};
  for (const auto& operand : operands) {
    cpu::Allocation a;
    if (operand.bytes == 0 || (cpu::find_allocation(operand.p, operand.bytes, a) && a.device == handle->device))
      continue;
    std::fprintf(stderr, "cpu: %s on device %d: %s (%p, %zu bytes) is not inside one allocation of that device\n",
                 function, handle->device, operand.name, operand.p, operand.bytes);
    cpu::set_sticky_error(cudaErrorIllegalAddress);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!cpu::has_gemm_workspace(handle)) return CUBLAS_STATUS_ALLOC_FAILED;
  cpu::count_launch();  // a cuBLAS call launches at least one kernel on a GPU: counted as one
  cpu::enqueue(handle->stream, function, std::move(work));
  return CUBLAS_STATUS_SUCCESS;
}

// For real matrices the conjugate transpose is the transpose.
CBLAS_TRANSPOSE to_cblas(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

// One single-threaded OpenBLAS call. BLAS semantics, which cuBLAS shares: beta == 0 sets C
// without reading it.
void blas_call(const Shape& s, float alpha, const float* A, const float* B, float beta, float* C) {
  cpu::blas_library().sgemm(CblasColMajor, to_cblas(s.transa), to_cblas(s.transb), s.m, s.n, s.k, alpha, A, s.lda,
                            B, s.ldb, beta, C, s.ldc);
}
void blas_call(const Shape& s, double alpha, const double* A, const double* B, double beta, double* C) {
  cpu::blas_library().dgemm(CblasColMajor, to_cblas(s.transa), to_cblas(s.transb), s.m, s.n, s.k, alpha, A, s.lda,
                            B, s.ldb, beta, C, s.ldc);
}

// A GEMM runs as tiles of C, 1024 rows by 256 columns (the last ones smaller), each tile one
// call: the tiles are a function of the shape alone, so the BLAS threads that share them out
// (cpu/blas/blas_threads.h) cannot change a bit of the result. (OpenBLAS's own threads split by their
// count, and the edge tiles of a split run other kernels: docs/cpu-build.md, "GEMMs".) Tiles this
// size keep about 95% of a whole call's speed on one thread.
constexpr int tile_rows = 1024, tile_cols = 256;

// batch_count GEMMs; matrix i of each operand starts i * stride elements after the first.
template <typename T>
void gemm_batched(const Shape& s, T alpha, const T* A, long long stride_a, const T* B, long long stride_b, T beta,
                  T* C, long long stride_c, int batch_count) {
  const int row_tiles = (s.m + tile_rows - 1) / tile_rows, col_tiles = (s.n + tile_cols - 1) / tile_cols;
  const int tiles = row_tiles * col_tiles;
  cpu::run_blas_tasks(batch_count * tiles, [&](int task) {
    const long long matrix = task / tiles;
    const int row = task % tiles % row_tiles * tile_rows, col = task % tiles / row_tiles * tile_cols;
    Shape tile = s;
    tile.m = std::min(tile_rows, s.m - row);
    tile.n = std::min(tile_cols, s.n - col);
    // Rows of op(A) are columns of a transposed A; columns of op(B) are rows of a transposed B.
    const long long a_offset = s.transa == CUBLAS_OP_N ? row : (long long)row * s.lda;
    const long long b_offset = s.transb == CUBLAS_OP_N ? (long long)col * s.ldb : col;
    blas_call(tile, alpha, A + matrix * stride_a + a_offset, B + matrix * stride_b + b_offset, beta,
              C + matrix * stride_c + (long long)col * s.ldc + row);
  });
}

// An fp32 GEMM on A and B rounded to TF32, C in fp32: the rounded copies keep the batch, so its
// matrices still share the BLAS threads.
void gemm_batched_tf32(const Shape& s, float alpha, const float* A, long long stride_a, const float* B,
                       long long stride_b, float beta, float* C, long long stride_c, int batch_count) {
  // Rounded copies of the operands, kept by the stream worker so that repeated GEMMs do not allocate.
  struct Scratch {
    std::vector<float> a_tf32, b_tf32;
  };
  thread_local Scratch handle;
  Shape packed = s;
  packed.lda = std::max(1, rows_a(s));
  packed.ldb = std::max(1, rows_b(s));
  cpu::round_to_tf32(A, rows_a(s), cols_a(s), s.lda, stride_a, batch_count, handle.a_tf32);
  cpu::round_to_tf32(B, rows_b(s), cols_b(s), s.ldb, stride_b, batch_count, handle.b_tf32);
  gemm_batched(packed, alpha, handle.a_tf32.data(), (long long)rows_a(s) * cols_a(s), handle.b_tf32.data(),
               (long long)rows_b(s) * cols_b(s), beta, C, stride_c, batch_count);
}

// Whether a GEMM of fp32 A and B may use TF32 on a GPU, as the compute type and the handle's
// math mode (without its flag bit) allow.
bool tf32_allowed(cublasHandle_t handle, cublasComputeType_t compute) {
  const bool tf32_mode = (int(handle->math_mode) & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) ==
                         int(CUBLAS_TF32_TENSOR_OP_MATH);
  return compute == CUBLAS_COMPUTE_32F_FAST_TF32 || (compute == CUBLAS_COMPUTE_32F && tf32_mode);
}

// The fp32 GEMM queued for a call: on TF32 inputs where tf32 is set.
std::function<void()> fp32_gemm(const Shape& s, float alpha, const float* A, long long stride_a, const float* B,
                                long long stride_b, float beta, float* C, long long stride_c, int batch_count,
                                bool tf32) {
  if (tf32)
    return [=] { gemm_batched_tf32(s, alpha, A, stride_a, B, stride_b, beta, C, stride_c, batch_count); };
  return [=] { gemm_batched(s, alpha, A, stride_a, B, stride_b, beta, C, stride_c, batch_count); };
}

// bf16 A and B, C in bf16 or fp32: the inputs are widened to fp32 (exactly), the GEMM
// runs in fp32, and a bf16 C is rounded once at the end, as cuBLAS with CUBLAS_COMPUTE_32F.
void gemm_batched_bf16(const Shape& s, float alpha, const __nv_bfloat16* A, long long stride_a,
                       const __nv_bfloat16* B, long long stride_b, float beta, void* C, cudaDataType c_type,
                       long long stride_c, int batch_count) {
  // fp32 copies of the operands, kept by the stream worker so that repeated GEMMs do not allocate.
  struct Scratch {
    std::vector<float> a_fp32, b_fp32, c_fp32;
  };
  thread_local Scratch handle;
  Shape packed = s;
  packed.lda = std::max(1, rows_a(s));
  packed.ldb = std::max(1, rows_b(s));
  for (long long i = 0; i < batch_count; ++i) {
    cpu::widen(A + i * stride_a, rows_a(s), cols_a(s), s.lda, handle.a_fp32);
    cpu::widen(B + i * stride_b, rows_b(s), cols_b(s), s.ldb, handle.b_fp32);
    if (c_type == CUDA_R_32F) {
      gemm_batched(packed, alpha, handle.a_fp32.data(), 0, handle.b_fp32.data(), 0, beta,
                   static_cast<float*>(C) + i * stride_c, 0, 1);
      continue;
    }
    __nv_bfloat16* C_i = static_cast<__nv_bfloat16*>(C) + i * stride_c;
    Shape packed_c = packed;
    packed_c.ldc = std::max(1, s.m);
    handle.c_fp32.resize(size_t(s.m) * s.n);
    if (beta != 0.0f) cpu::widen(C_i, s.m, s.n, s.ldc, handle.c_fp32);
    gemm_batched(packed_c, alpha, handle.a_fp32.data(), 0, handle.b_fp32.data(), 0, beta, handle.c_fp32.data(), 0, 1);
    cpu::narrow(handle.c_fp32, s.m, s.n, C_i, s.ldc);
  }
}

std::string type_name(cudaDataType t) {
  switch (t) {
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    default: return "cudaDataType " + std::to_string(int(t));
  }
}
std::string compute_name(cublasComputeType_t t) {
  switch (t) {
    case CUBLAS_COMPUTE_16F: return "CUBLAS_COMPUTE_16F";
    case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_FAST_16F: return "CUBLAS_COMPUTE_32F_FAST_16F";
    case CUBLAS_COMPUTE_32F_FAST_16BF: return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case CUBLAS_COMPUTE_64F: return "CUBLAS_COMPUTE_64F";
    default: return "cublasComputeType_t " + std::to_string(int(t));
  }
}

// GemmEx and GemmStridedBatchedEx (GemmEx is one batch). Where TF32 is allowed, fp32 inputs are
// rounded to TF32 (tf32_allowed); CUBLAS_COMPUTE_32F_FAST_16BF, which the project does not use,
// computes in plain fp32.
cublasStatus_t gemm_ex(const char* function, cublasHandle_t handle, const Shape& s, const void* alpha,
                       const void* A, cudaDataType a_type, long long stride_a, const void* B,
                       cudaDataType b_type, long long stride_b, const void* beta, void* C, cudaDataType c_type,
                       long long stride_c, int batch_count, cublasComputeType_t compute,
                       cublasGemmAlgo_t algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    cpu::unsupported((std::string(function) + " with algo " + std::to_string(int(algo))).c_str());
  const bool fp32_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                            compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  const bool fp32 = a_type == CUDA_R_32F && b_type == CUDA_R_32F && c_type == CUDA_R_32F && fp32_compute;
  const bool bf16 = a_type == CUDA_R_16BF && b_type == CUDA_R_16BF &&
                    (c_type == CUDA_R_16BF || c_type == CUDA_R_32F) && compute == CUBLAS_COMPUTE_32F;
  const bool fp64 = a_type == CUDA_R_64F && b_type == CUDA_R_64F && c_type == CUDA_R_64F &&
                    compute == CUBLAS_COMPUTE_64F;
  if (!fp32 && !bf16 && !fp64)
    cpu::unsupported((std::string(function) + " with Atype " + type_name(a_type) + ", Btype " + type_name(b_type) +
                      ", Ctype " + type_name(c_type) + ", computeType " + compute_name(compute))
                         .c_str());
  const cublasStatus_t status = check_gemm(handle, s, alpha, beta, C, batch_count);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  // alpha and beta have the compute type: float for the fp32 computes, double for fp64.
  if (fp32) {
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    return queue_gemm(function, handle, s, A, stride_a, B, stride_b, C, stride_c, batch_count, 4, 4,
                      fp32_gemm(s, a, static_cast<const float*>(A), stride_a, static_cast<const float*>(B), stride_b,
                                b, static_cast<float*>(C), stride_c, batch_count, tf32_allowed(handle, compute)));
  }
  if (bf16) {
    const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
    return queue_gemm(function, handle, s, A, stride_a, B, stride_b, C, stride_c, batch_count, 2,
                      c_type == CUDA_R_32F ? 4 : 2, [=] {
                        gemm_batched_bf16(s, a, static_cast<const __nv_bfloat16*>(A), stride_a,
                                          static_cast<const __nv_bfloat16*>(B), stride_b, b, C, c_type, stride_c,
                                          batch_count);
                      });
  }
  const double a = *static_cast<const double*>(alpha), b = *static_cast<const double*>(beta);
  return queue_gemm(function, handle, s, A, stride_a, B, stride_b, C, stride_c, batch_count, 8, 8, [=] {
    gemm_batched(s, a, static_cast<const double*>(A), stride_a, static_cast<const double*>(B), stride_b, b,
                 static_cast<double*>(C), stride_c, batch_count);
  });
}

}  // namespace

// ---- GEMM ----

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  return cublasDgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
  const Shape s{transa, transb, m, n, k, lda, ldb, ldc};
  const cublasStatus_t status = check_gemm(handle, s, alpha, beta, C, batchCount);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  return queue_gemm("cublasSgemmStridedBatched", handle, s, A, strideA, B, strideB, C, strideC, batchCount, 4, 4,
                    fp32_gemm(s, *alpha, A, strideA, B, strideB, *beta, C, strideC, batchCount,
                              tf32_allowed(handle, CUBLAS_COMPUTE_32F)));
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long strideA, const double* B, int ldb, long long strideB,
                                         const double* beta, double* C, int ldc, long long strideC, int batchCount) {
  const Shape s{transa, transb, m, n, k, lda, ldb, ldc};
  const cublasStatus_t status = check_gemm(handle, s, alpha, beta, C, batchCount);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const double a = *alpha, b = *beta;
  return queue_gemm("cublasDgemmStridedBatched", handle, s, A, strideA, B, strideB, C, strideC, batchCount, 8, 8,
                    [=] { gemm_batched(s, a, A, strideA, B, strideB, b, C, strideC, batchCount); });
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return gemm_ex("cublasGemmEx", handle, Shape{transa, transb, m, n, k, lda, ldb, ldc}, alpha, A, Atype, 0, B,
                 Btype, 0, beta, C, Ctype, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  return gemm_ex("cublasGemmStridedBatchedEx", handle, Shape{transa, transb, m, n, k, lda, ldb, ldc}, alpha, A,
                 Atype, strideA, B, Btype, strideB, beta, C, Ctype, strideC, batchCount, computeType, algo);
}
