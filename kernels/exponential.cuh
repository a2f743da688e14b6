// e^x for the kernels: expf and exp. One header, so that a build can give the kernels another
// implementation with the same bits (the CPU build's, in its own kernels/exponential.cuh, is one
// that a loop over elements can vectorise).
#pragma once
#include <cuda_runtime.h>

__device__ inline float exponential(float x) { return expf(x); }
__device__ inline double exponential(double x) { return exp(x); }
