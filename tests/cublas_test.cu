// The cuBLAS calls the project makes, against a triple loop in double: every transpose
// pair, leading dimensions with padding, strided batches with gaps between matrices,
// alpha and beta other than 0 and 1, beta = 0 over a C of NaN, bf16 operands, argument
// checks, and the handle's settings. Runs in both builds.
#include <gtest/gtest.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cublas_check.cuh"
#include "kernels/gemm.cuh"
#include "tests/cublas_gemm_calls.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"

namespace {

using namespace cublas_calls;

// batch matrices per operand, each `stride` elements after the previous one. The
// 11 elements between matrices and the padding rows hold values the GEMM must not use.
struct Operands {
  int batch;
  long long stride_a, stride_b, stride_c;
  std::vector<double> a, b, c;
};

// Random operands in [-1, 1), rounded to the types they are stored in (TAB for A and B,
// TC for C), so that the loop sees exactly what the GEMM sees.
template <typename TAB, typename TC>
Operands random_operands(const Gemm& g, int batch, uint64_t seed) {
  Operands o{batch, (long long)g.lda * cols_a(g) + 11, (long long)g.ldb * cols_b(g) + 11,
             (long long)g.ldc * g.n + 11, {}, {}, {}};
  o.a = to_double(convert<TAB>(random_values(size_t(o.stride_a * batch), seed)));
  o.b = to_double(convert<TAB>(random_values(size_t(o.stride_b * batch), seed + 1)));
  o.c = to_double(convert<TC>(random_values(size_t(o.stride_c * batch), seed + 2)));
  return o;
}

// The expected C with, per entry, the scale of its rounding error:
// |alpha| sum_l |op(A)_il op(B)_lj| + |beta C_ij|. Entries outside the m x n blocks keep
// their value with scale 0: the GEMM must not touch them. beta == 0 ignores C, as cuBLAS.
struct Expected {
  std::vector<double> value, scale;
};
Expected reference_gemm(const Gemm& g, const Operands& o) {
  Expected e{o.c, std::vector<double>(o.c.size(), 0.0)};
  for (long long p = 0; p < o.batch; ++p) {
    const double* A = o.a.data() + p * o.stride_a;
    const double* B = o.b.data() + p * o.stride_b;
    for (int i = 0; i < g.m; ++i)
      for (int j = 0; j < g.n; ++j) {
        double sum = 0.0, magnitude = 0.0;
        for (int l = 0; l < g.k; ++l) {
          const double a = g.transa == CUBLAS_OP_N ? A[i + l * g.lda] : A[l + i * g.lda];
          const double b = g.transb == CUBLAS_OP_N ? B[l + j * g.ldb] : B[j + l * g.ldb];
          sum += a * b;
          magnitude += std::fabs(a * b);
        }
        const size_t at = size_t(p * o.stride_c + i + (long long)j * g.ldc);
        const double c = g.beta == 0.0 ? 0.0 : e.value[at];
        e.value[at] = g.alpha * sum + g.beta * c;
        e.scale[at] = std::fabs(g.alpha) * magnitude + std::fabs(g.beta * c);
      }
  }
  return e;
}

// gamma_n = n u / (1 - n u) bounds the relative error of n roundings at unit roundoff u;
// a GEMM makes k + 2 of them per entry (k - 1 sums, a product, alpha and beta).
double accumulation_bound(const Gemm& g, double u) { return (g.k + 2) * u / (1 - (g.k + 2) * u); }
const double kFp64Roundoff = std::ldexp(1.0, -53);
const double kFp32Roundoff = std::ldexp(1.0, -24);
const double kBf16Roundoff = std::ldexp(1.0, -8);  // 8 significant bits
// fp32 operands are exact, so only fp32 accumulation errs.
double fp32_tolerance(const Gemm& g) { return accumulation_bound(g, kFp32Roundoff); }
// fp64 accumulation errs, and so does the loop, in the same precision.
double fp64_tolerance(const Gemm& g) { return 2 * accumulation_bound(g, kFp64Roundoff); }
// fp32 accumulation, then rounding to bf16: 2^-8 of |C|, itself within (1 + fp32 bound)
// of the scale; doubling the fp32 bound covers that cross term.
double bf16_output_tolerance(const Gemm& g) { return kBf16Roundoff + 2 * fp32_tolerance(g); }
// The fast fp32 computes may round each input on a GPU, to tf32 (11 significant bits) or
// bf16 (8): a product then errs by 2 u, 4 u if the hardware truncates. The CPU build rounds to
// tf32 (to nearest, tests/cpu/blas_test.cu) and computes FAST_16BF in plain fp32.
double fast_fp32_tolerance(const Gemm& g, cublasComputeType_t compute) {
  const double input_roundoff = compute == CUBLAS_COMPUTE_32F_FAST_TF32   ? std::ldexp(1.0, -11)
                                : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? kBf16Roundoff
                                                                          : 0.0;
  return 4 * input_roundoff + fp32_tolerance(g);
}

// Every entry within tolerance * scale of the expected value: exact where the scale is 0,
// NaN where NaN is expected (padding left alone).
::testing::AssertionResult matches(const std::vector<double>& actual, const Expected& expected, double tolerance) {
  for (size_t i = 0; i < actual.size(); ++i) {
    const double want = expected.value[i];
    const bool ok = std::isnan(want) ? std::isnan(actual[i])
                                     : std::fabs(actual[i] - want) <= tolerance * expected.scale[i];
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": got " << actual[i] << ", expected " << want
                                           << " within " << tolerance * expected.scale[i];
  }
  return ::testing::AssertionSuccess();
}

// C after cublasSgemm / cublasDgemm (one matrix) or their strided batches (several).
template <typename T>
std::vector<double> run_gemm(cublasHandle_t handle, const Gemm& g, const Operands& o) {
  DeviceBuffer<T> A(convert<T>(o.a)), B(convert<T>(o.b)), C(convert<T>(o.c));
  const T alpha = T(g.alpha), beta = T(g.beta);
  if constexpr (std::is_same_v<T, float>) {
    if (o.batch == 1)
      CUBLAS_CHECK(cublasSgemm(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, A.data(), g.lda, B.data(), g.ldb,
                               &beta, C.data(), g.ldc));
    else
      CUBLAS_CHECK(cublasSgemmStridedBatched(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, A.data(), g.lda,
                                             o.stride_a, B.data(), g.ldb, o.stride_b, &beta, C.data(), g.ldc,
                                             o.stride_c, o.batch));
  } else {
    if (o.batch == 1)
      CUBLAS_CHECK(cublasDgemm(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, A.data(), g.lda, B.data(), g.ldb,
                               &beta, C.data(), g.ldc));
    else
      CUBLAS_CHECK(cublasDgemmStridedBatched(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, A.data(), g.lda,
                                             o.stride_a, B.data(), g.ldb, o.stride_b, &beta, C.data(), g.ldc,
                                             o.stride_c, o.batch));
  }
  return to_double(C.to_host());
}

template <typename T>
cudaDataType data_type() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else return CUDA_R_64F;
}

// C after cublasGemmEx (one matrix) or cublasGemmStridedBatchedEx (several), with A and B
// stored as TAB and C as TC; alpha and beta have the compute type's precision.
template <typename TAB, typename TC>
std::vector<double> run_gemm_ex(cublasHandle_t handle, const Gemm& g, const Operands& o, cublasComputeType_t compute,
                                cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT) {
  using Scalar = std::conditional_t<std::is_same_v<TC, double>, double, float>;
  DeviceBuffer<TAB> A(convert<TAB>(o.a)), B(convert<TAB>(o.b));
  DeviceBuffer<TC> C(convert<TC>(o.c));
  const Scalar alpha = Scalar(g.alpha), beta = Scalar(g.beta);
  if (o.batch == 1)
    CUBLAS_CHECK(cublasGemmEx(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, A.data(), data_type<TAB>(), g.lda,
                              B.data(), data_type<TAB>(), g.ldb, &beta, C.data(), data_type<TC>(), g.ldc, compute,
                              algo));
  else
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, g.transa, g.transb, g.m, g.n, g.k, &alpha, A.data(),
                                            data_type<TAB>(), g.lda, o.stride_a, B.data(), data_type<TAB>(), g.ldb,
                                            o.stride_b, &beta, C.data(), data_type<TC>(), g.ldc, o.stride_c, o.batch,
                                            compute, algo));
  return to_double(C.to_host());
}

class Cublas : public ::testing::Test {
 protected:
  void SetUp() override { CUBLAS_CHECK(cublasCreate(&handle)); }
  void TearDown() override { CUBLAS_CHECK(cublasDestroy(handle)); }
  cublasHandle_t handle = nullptr;
};

TEST_F(Cublas, SgemmAndStridedBatchedMatchLoop) {
  for (auto [transa, transb] : kTransposePairs)
    for (int batch : {1, 3}) {
      const Gemm g = odd_gemm(transa, transb);
      const Operands o = random_operands<float, float>(g, batch, 100 + 10 * transa + transb);
      EXPECT_TRUE(matches(run_gemm<float>(handle, g, o), reference_gemm(g, o), fp32_tolerance(g)))
          << describe(g, batch);
    }
}

TEST_F(Cublas, DgemmAndStridedBatchedMatchLoop) {
  for (auto [transa, transb] : kTransposePairs)
    for (int batch : {1, 3}) {
      const Gemm g = odd_gemm(transa, transb);
      const Operands o = random_operands<double, double>(g, batch, 200 + 10 * transa + transb);
      EXPECT_TRUE(matches(run_gemm<double>(handle, g, o), reference_gemm(g, o), fp64_tolerance(g)))
          << describe(g, batch);
    }
}

TEST_F(Cublas, GemmExFp32MatchesLoopForEveryFp32ComputeAndDefaultAlgo) {
  for (cublasComputeType_t compute :
       {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16BF})
    for (cublasGemmAlgo_t algo : {CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT_TENSOR_OP})
      for (auto [transa, transb] : kTransposePairs)
        for (int batch : {1, 3}) {
          const Gemm g = odd_gemm(transa, transb);
          const Operands o = random_operands<float, float>(g, batch, 300 + 10 * transa + transb);
          EXPECT_TRUE(matches(run_gemm_ex<float, float>(handle, g, o, compute, algo), reference_gemm(g, o),
                              fast_fp32_tolerance(g, compute)))
              << describe(g, batch) << ", computeType " << compute << ", algo " << algo;
        }
}

TEST_F(Cublas, GemmExBf16ToBf16MatchesLoopOnRoundedInputs) {
  for (auto [transa, transb] : kTransposePairs)
    for (int batch : {1, 3}) {
      const Gemm g = odd_gemm(transa, transb);
      const Operands o = random_operands<__nv_bfloat16, __nv_bfloat16>(g, batch, 400 + 10 * transa + transb);
      EXPECT_TRUE(matches(run_gemm_ex<__nv_bfloat16, __nv_bfloat16>(handle, g, o, CUBLAS_COMPUTE_32F),
                          reference_gemm(g, o), bf16_output_tolerance(g)))
          << describe(g, batch);
    }
}

TEST_F(Cublas, GemmExBf16ToFp32MatchesLoopOnRoundedInputs) {
  for (auto [transa, transb] : kTransposePairs)
    for (int batch : {1, 3}) {
      const Gemm g = odd_gemm(transa, transb);
      const Operands o = random_operands<__nv_bfloat16, float>(g, batch, 500 + 10 * transa + transb);
      // bf16 products are exact in fp32: only the fp32 accumulation errs.
      EXPECT_TRUE(matches(run_gemm_ex<__nv_bfloat16, float>(handle, g, o, CUBLAS_COMPUTE_32F), reference_gemm(g, o),
                          fp32_tolerance(g)))
          << describe(g, batch);
    }
}

TEST_F(Cublas, GemmExFp64MatchesLoop) {
  for (auto [transa, transb] : kTransposePairs)
    for (int batch : {1, 3}) {
      const Gemm g = odd_gemm(transa, transb);
      const Operands o = random_operands<double, double>(g, batch, 600 + 10 * transa + transb);
      EXPECT_TRUE(matches(run_gemm_ex<double, double>(handle, g, o, CUBLAS_COMPUTE_64F), reference_gemm(g, o),
                          fp64_tolerance(g)))
          << describe(g, batch);
    }
}

TEST_F(Cublas, BetaZeroDoesNotReadC) {
  for (auto [transa, transb] : kTransposePairs)
    for (int batch : {1, 3}) {
      const Gemm g = odd_gemm(transa, transb, 0.0);
      // bf16 values, exact in every type, so that all calls share one reference.
      Operands o = random_operands<__nv_bfloat16, __nv_bfloat16>(g, batch, 700 + 10 * transa + transb);
      o.c.assign(o.c.size(), std::numeric_limits<double>::quiet_NaN());
      const Expected expected = reference_gemm(g, o);  // finite in the m x n blocks, NaN elsewhere
      const double fp32 = fp32_tolerance(g), bf16 = bf16_output_tolerance(g);
      EXPECT_TRUE(matches(run_gemm<float>(handle, g, o), expected, fp32)) << describe(g, batch);
      EXPECT_TRUE(matches(run_gemm<double>(handle, g, o), expected, fp32)) << describe(g, batch);
      EXPECT_TRUE(matches(run_gemm_ex<float, float>(handle, g, o, CUBLAS_COMPUTE_32F), expected, fp32))
          << describe(g, batch);
      EXPECT_TRUE(matches(run_gemm_ex<__nv_bfloat16, __nv_bfloat16>(handle, g, o, CUBLAS_COMPUTE_32F), expected, bf16))
          << describe(g, batch);
      EXPECT_TRUE(matches(run_gemm_ex<__nv_bfloat16, float>(handle, g, o, CUBLAS_COMPUTE_32F), expected, fp32))
          << describe(g, batch);
      EXPECT_TRUE(matches(run_gemm_ex<double, double>(handle, g, o, CUBLAS_COMPUTE_64F), expected, fp32))
          << describe(g, batch);
    }
}

// cuBLAS's reference lists each of these under CUBLAS_STATUS_INVALID_VALUE for every function
// called (cublas<t>gemm, cublas<t>gemmStridedBatched, cublasGemmEx, cublasGemmStridedBatchedEx),
// so a GPU answers as the CPU build does. What the reference leaves open (CUBLAS_OP_CONJG, a
// negative batchCount, a null handle) is checked in the CPU build only: tests/cpu/cublas_status_test.cu.
TEST_F(Cublas, NegativeSizesAndShortLeadingDimensionsReturnInvalidValue) {
  for (auto [transa, transb] : kTransposePairs) {
    const Gemm valid = odd_gemm(transa, transb);
    auto with = [&](auto change) {
      Gemm g = valid;
      change(g);
      return g;
    };
    const std::pair<const char*, Gemm> invalid[] = {
        {"m < 0", with([](Gemm& g) { g.m = -1; })},
        {"n < 0", with([](Gemm& g) { g.n = -1; })},
        {"k < 0", with([](Gemm& g) { g.k = -1; })},
        {"lda < rows of A", with([](Gemm& g) { g.lda = rows_a(g) - 1; })},
        {"ldb < rows of B", with([](Gemm& g) { g.ldb = rows_b(g) - 1; })},
        {"ldc < m", with([](Gemm& g) { g.ldc = g.m - 1; })},
    };
    for (const auto& [what, bad] : invalid)
      for (const auto& [call, status] : status_of_every_gemm(handle, bad, 2))
        EXPECT_EQ(status, CUBLAS_STATUS_INVALID_VALUE) << call << " with " << what << ", " << describe(valid, 2);
  }
}

TEST_F(Cublas, HandleKeepsStreamMathModeAndHostPointerMode) {
  cudaStream_t stream, got_stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  CUBLAS_CHECK(cublasGetStream(handle, &got_stream));
  EXPECT_EQ(got_stream, stream);

  cublasMath_t mode;
  CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH));
  CUBLAS_CHECK(cublasGetMathMode(handle, &mode));
  EXPECT_EQ(mode, CUBLAS_TF32_TENSOR_OP_MATH);

  cublasPointerMode_t pointer_mode;
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  CUBLAS_CHECK(cublasGetPointerMode(handle, &pointer_mode));
  EXPECT_EQ(pointer_mode, CUBLAS_POINTER_MODE_HOST);

  CUBLAS_CHECK(cublasSetStream(handle, nullptr));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// kernels/gemm.cuh's GEMMs check the handle's stream instead of setting it (cublasSetStream would
// put the handle back on the library's own workspace, outside the memory plan).
TEST_F(Cublas, GemmOnAHandleBoundToAnotherStreamIsRefused) {
  DeviceBuffer<float> a(4), b(4), c(4);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  EXPECT_THROW(gemm_batched<float>(handle, false, false, 2, 2, 2, 1, a.data(), 0, b.data(), 0, 0, c.data(), 0, 1, stream),
               std::logic_error);
  gemm_batched<float>(handle, false, false, 2, 2, 2, 1, a.data(), 0, b.data(), 0, 0, c.data(), 0, 1, nullptr);
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(Cublas, StatusNamesSpellTheEnumAndStringsExplain) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_EXECUTION_FAILED), "CUBLAS_STATUS_EXECUTION_FAILED");
  EXPECT_GT(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).size(), 0u);
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE));
}

}  // namespace
