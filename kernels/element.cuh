// Element types of the kernels: double (for gradient checks), float, and bf16
// storage with fp32 arithmetic. Kernels load with to_compute and store with
// from_compute, and accumulate in Compute<T>.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

template <typename T> struct ComputeType { using type = float; };
template <> struct ComputeType<double> { using type = double; };
// The arithmetic type for storage type T: double for double, float otherwise.
template <typename T> using Compute = typename ComputeType<T>::type;

__device__ __host__ inline double to_compute(double x) { return x; }
__device__ __host__ inline float to_compute(float x) { return x; }
__device__ __host__ inline float to_compute(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __host__ inline T from_compute(Compute<T> x) { return T(x); }
template <> __device__ __host__ inline __nv_bfloat16 from_compute<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);  // round to nearest even
}
