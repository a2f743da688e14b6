// e^x for the kernels, CPU build: shadows kernels/exponential.cuh. exp(double) is libm's. expf is
// glibc's algorithm written out here, so that a loop of them vectorises (a call to libm's does
// not), with the bits of the libm that glibc 2.28 and later pick on a CPU with FMA and AVX2
// (__expf_fma): equal on all 2^32 floats (tools/exponential_bench.cu; docs/cpu-build.md).
//
// The algorithm (glibc's sysdeps/ieee754/flt-32/e_expf.c, 2017): in double, with N = 32,
// x N / ln 2 = k + r, |r| <= 1/2; e^x = 2^(k/N) 2^(r/N), with 2^(k/N) from a table of 2^(i/N) by
// k mod N and k's high bits added to its exponent, and 2^(r/N) by a cubic. __expf_fma is that C
// compiled with fused multiply-adds: the five fmas below are where it has them.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cpu {

// 2^(i/32) rounded to double, as bits, less i << 47 (which the exponent's k adds back).
inline constexpr uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

inline float expf_fma(float x) {
  constexpr double n_over_ln2 = 0x1.71547652b82fep+5;
  constexpr double shift = 0x1.8p52;  // adding it rounds to an integer, in the low bits
  constexpr double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                   c2 = 0x1.62e42ff0c52d6p-1 / 32;
  const double xd = x;
  const double k_shifted = __builtin_fma(n_over_ln2, xd, shift);
  uint64_t k;
  std::memcpy(&k, &k_shifted, sizeof k);
  const double r = __builtin_fma(n_over_ln2, xd, -(k_shifted - shift));
  const uint64_t scale_bits = kExp2Table[k % 32] + (k << 47);
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const double cubic = __builtin_fma(__builtin_fma(c0, r, c1), r * r, __builtin_fma(c2, r, 1.0));
  float result = float(cubic * scale);
  // Beyond the cubic's range, as glibc: e^x overflows above log(2^128) and is 0 below log(2^-150)
  // (and at -inf); NaN stays NaN. Selects, not branches, so that a loop of them vectorises.
  result = x > 0x1.62e42ep6f ? HUGE_VALF : result;
  result = x < -0x1.9fe368p6f ? 0.0f : result;
  return x != x ? x + x : result;
}

}  // namespace cpu

inline float exponential(float x) { return cpu::expf_fma(x); }
inline double exponential(double x) { return std::exp(x); }
