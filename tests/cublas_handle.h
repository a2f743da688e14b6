// A cuBLAS handle for tests, created and destroyed with the test's scope.
#pragma once
#include <cublas_v2.h>

#include "kernels/cublas_check.cuh"

class CublasHandle {
 public:
  CublasHandle() { CUBLAS_CHECK(cublasCreate(&handle_)); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() { cublasDestroy(handle_); }
  operator cublasHandle_t() const { return handle_; }
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_;
};
