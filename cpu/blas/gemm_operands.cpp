// GEMM operands as cuBLAS's kernels see them (cpu/blas/gemm_operands.h).
#include "cpu/blas/gemm_operands.h"

#include <cstdint>
#include <cstring>

namespace cpu {

// Copies the (rows, cols) bf16 matrix at `in` (leading dimension ld) into `out` as fp32,
// packed (leading dimension rows).
void widen(const __nv_bfloat16* in, int rows, int cols, int ld, std::vector<float>& out) {
  out.resize(size_t(rows) * cols);
  for (size_t j = 0; j < size_t(cols); ++j)
    for (size_t i = 0; i < size_t(rows); ++i) out[j * rows + i] = __bfloat162float(in[j * ld + i]);
}
// The reverse of widen, rounding to nearest even.
void narrow(const std::vector<float>& in, int rows, int cols, __nv_bfloat16* out, int ld) {
  for (size_t j = 0; j < size_t(cols); ++j)
    for (size_t i = 0; i < size_t(rows); ++i) out[j * ld + i] = __float2bfloat16(in[j * rows + i]);
}

// TF32, where cuBLAS may use it (CUBLAS_COMPUTE_32F_FAST_TF32, or fp32 compute on a handle in
// CUBLAS_TF32_TENSOR_OP_MATH): each element of A and B is rounded to TF32 (fp32's sign and
// exponent, 10 explicit mantissa bits), then the GEMM runs in fp32 as before: a product of two
// TF32 values is exact in fp32, so only the accumulation rounds, as on tensor cores. The
// rounding is to nearest, ties away from zero: PTX's cvt.rna.tf32.f32, the conversion NVIDIA
// documents (wmma's __float_to_tf32 in crt/mma.h is that instruction), and what CUTLASS prefers
// for fp32 inputs of TF32 products (PreferredRoundingMode<tfloat32_t, float> is
// round_half_ulp_truncate, in cutlass/numeric_conversion.h). Tensor cores fed fp32 bits without
// a conversion read only the top 10 mantissa bits (PyTorch's numerical-accuracy notes), a
// truncation; which of the two cuBLAS does is not documented. tools/compare_losses.py says what
// either costs a comparison of the two builds.
float round_to_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // keeps a NaN a NaN (its payload may sit in the dropped bits)
  bits = (bits + 0x1000u) & ~0x1fffu;                  // add half of the 13 dropped bits' unit, then drop them
  std::memcpy(&x, &bits, sizeof bits);
  return x;
}

namespace {

// Rounds n contiguous elements to TF32, four at a time (one SSE2 register; g++ splits wider
// vectors into scalar compares there): the same integer operations as round_to_tf32(float),
// with a select instead of its branch. g++ -O2 does not vectorise a loop whose trip count is
// unknown, and this copy was 9% of `mpirun -np 4 ./train`'s samples as a scalar loop.
void round_run_to_tf32(const float* in, float* out, size_t n) {
  using Lanes = uint32_t __attribute__((vector_size(16)));
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Lanes bits;
    std::memcpy(&bits, in + i, sizeof bits);
    const Lanes not_finite = Lanes((bits & 0x7f800000u) == 0x7f800000u);  // all ones where NaN or infinite
    bits = (bits & not_finite) | (((bits + 0x1000u) & ~0x1fffu) & ~not_finite);
    std::memcpy(out + i, &bits, sizeof bits);
  }
  for (; i < n; ++i) out[i] = round_to_tf32(in[i]);
}

}  // namespace

// Copies batch_count (rows, cols) fp32 matrices, the first at `in` and each `stride` elements
// after the previous (leading dimension ld), into `out`, packed one after the other (leading
// dimension rows), each element rounded to TF32.
void round_to_tf32(const float* in, int rows, int cols, int ld, long long stride, int batch_count,
                   std::vector<float>& out) {
  const size_t size = size_t(rows) * cols;
  out.resize(size * batch_count);
  for (size_t matrix = 0; matrix < size_t(batch_count); ++matrix)
    for (size_t j = 0; j < size_t(cols); ++j)
      round_run_to_tf32(in + matrix * stride + j * ld, out.data() + matrix * size + j * rows, size_t(rows));
}

}  // namespace cpu
