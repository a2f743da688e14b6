// The CPU build's cuBLAS statuses for calls whose answer cuBLAS's reference leaves open, so a
// GPU may answer otherwise and these run in the CPU build only: CUBLAS_OP_CONJG (cublas_api.h
// calls it a placeholder, not supported in the current release: a GPU may give
// CUBLAS_STATUS_NOT_SUPPORTED), a negative batchCount, and a null handle (the reference gives
// CUBLAS_STATUS_NOT_INITIALIZED for a library that was not initialized, not for a null handle).
// The statuses a GPU documents are tests/cublas_test.cu's.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <string>

#include "kernels/cublas_check.cuh"
#include "tests/cublas_gemm_calls.h"

namespace {

using namespace cublas_calls;

class Cublas : public ::testing::Test {
 protected:
  void SetUp() override { CUBLAS_CHECK(cublasCreate(&handle)); }
  void TearDown() override { CUBLAS_CHECK(cublasDestroy(handle)); }
  cublasHandle_t handle = nullptr;
};

TEST_F(Cublas, ConjugateOperationReturnsInvalidValue) {
  for (cublasOperation_t transb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    Gemm g = odd_gemm(CUBLAS_OP_N, transb);
    g.transa = CUBLAS_OP_CONJG;
    for (const auto& [call, status] : status_of_every_gemm(handle, g, 2))
      EXPECT_EQ(status, CUBLAS_STATUS_INVALID_VALUE)
          << call << " with transa CUBLAS_OP_CONJG, transb " << (transb == CUBLAS_OP_N ? "N" : "T");
  }
}

TEST_F(Cublas, NegativeBatchCountReturnsInvalidValue) {
  for (const auto& [call, status] : status_of_every_gemm(handle, odd_gemm(CUBLAS_OP_N, CUBLAS_OP_N), -1)) {
    if (std::string(call).find("StridedBatched") != std::string::npos) {
      EXPECT_EQ(status, CUBLAS_STATUS_INVALID_VALUE) << call << " with batchCount < 0";
    }
  }
}

TEST_F(Cublas, NullHandleReturnsNotInitialized) {
  for (const auto& [call, status] : status_of_every_gemm(nullptr, odd_gemm(CUBLAS_OP_N, CUBLAS_OP_N), 1))
    EXPECT_EQ(status, CUBLAS_STATUS_NOT_INITIALIZED) << call;
}

}  // namespace
