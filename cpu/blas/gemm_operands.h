// The operands of the CPU build's GEMMs (cpu/blas/cublas.cpp) converted as cuBLAS's kernels see them:
// bf16 matrices widened to fp32 and the result narrowed back, and fp32 inputs rounded to TF32.
// Column-major, as cuBLAS; `ld` is a matrix's leading dimension, packed copies have ld = rows.
#pragma once
#include <cuda_bf16.h>

#include <vector>

namespace cpu {

// Copies the (rows, cols) bf16 matrix at `in` into `out` as fp32, packed.
void widen(const __nv_bfloat16* in, int rows, int cols, int ld, std::vector<float>& out);
// The reverse of widen, rounding to nearest even.
void narrow(const std::vector<float>& in, int rows, int cols, __nv_bfloat16* out, int ld);

// x rounded to TF32 (cpu/blas/gemm_operands.cpp says which rounding and why); NaN and infinities
// unchanged.
float round_to_tf32(float x);
// Copies batch_count (rows, cols) fp32 matrices, the first at `in` and each `stride` elements
// after the previous, into `out`, packed one after the other, each element rounded to TF32.
void round_to_tf32(const float* in, int rows, int cols, int ld, long long stride, int batch_count,
                   std::vector<float>& out);

}  // namespace cpu
