// The CPU build's GEMMs (cpu/blas/cublas.cpp, cpu/blas/blas_threads.h, cpu/blas/blas_library.h): a GEMM's bits
// do not depend on how many threads share it, the tiles add up to the whole product, the helper
// threads may touch the device's memory under strict memory, OpenBLAS runs the kernel set
// the settings ask for, and TF32 GEMMs round their inputs as PTX's cvt.rna.tf32.f32 does.
#include <gtest/gtest.h>
#include <strings.h>

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <utility>
#include <vector>

#include "cpu/blas/blas_library.h"
#include "cpu/runtime/settings.h"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "tests/device_buffer.h"

namespace {

// A batch of column-major GEMMs C = op(A) op(B) + C whose m and n cut into full and partial
// tiles (tiles are 1024 x 256): m = 1500 is one full row tile and one of 476 rows, n = 600 two
// full column tiles and one of 88 columns.
struct Problem {
  cublasOperation_t transa, transb;
  int m = 1500, n = 600, k = 70, batch = 2;
  int lda() const { return transa == CUBLAS_OP_N ? m : k; }
  int ldb() const { return transb == CUBLAS_OP_N ? k : n; }
  long long stride_a() const { return (long long)m * k; }
  long long stride_b() const { return (long long)k * n; }
  long long stride_c() const { return (long long)m * n; }
  float a(int b, int i, int l, const std::vector<float>& A) const {  // op(A)(i, l) of matrix b
    return A[b * stride_a() + (transa == CUBLAS_OP_N ? (long long)l * m + i : (long long)i * k + l)];
  }
  float b(int b, int l, int j, const std::vector<float>& B) const {  // op(B)(l, j) of matrix b
    return B[b * stride_b() + (transb == CUBLAS_OP_N ? (long long)j * k + l : (long long)l * n + j)];
  }
};

std::vector<float> random_values(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& v : values) v = normal(generator);
  return values;
}

class Blas : public testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    CUBLAS_CHECK(cublasCreate(&handle_));
  }
  void TearDown() override {
    CUBLAS_CHECK(cublasDestroy(handle_));
    cpu::settings() = saved_;
  }

  // C after one strided-batched GEMM on `threads` BLAS threads (the pool keeps the size it
  // had at its first use, at least 2 here: this machine has 2 cores, so the default is 2).
  std::vector<float> gemm(const Problem& p, int threads, const std::vector<float>& A, const std::vector<float>& B,
                          const std::vector<float>& C) {
    cpu::settings().blas_threads = threads;
    DeviceBuffer<float> a(A), b(B), c(C);
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSgemmStridedBatched(handle_, p.transa, p.transb, p.m, p.n, p.k, &one, a.data(), p.lda(),
                                           p.stride_a(), b.data(), p.ldb(), p.stride_b(), &one, c.data(), p.m,
                                           p.stride_c(), p.batch));
    return c.to_host();
  }

  cublasHandle_t handle_ = nullptr;
  cpu::Settings saved_ = cpu::settings();
};

TEST_F(Blas, ResultsAreBitwiseTheSameOnOneThreadAndOnSeveral) {
  for (cublasOperation_t transa : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t transb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const Problem p{transa, transb};
      const auto A = random_values(p.batch * p.stride_a(), 1), B = random_values(p.batch * p.stride_b(), 2),
                 C = random_values(p.batch * p.stride_c(), 3);
      const std::vector<float> one = gemm(p, 1, A, B, C), several = gemm(p, 4, A, B, C);
      EXPECT_EQ(std::memcmp(one.data(), several.data(), one.size() * sizeof(float)), 0)
          << "transa " << transa << ", transb " << transb;
    }
}

// Every tile lands where it belongs, the partial ones included: each element against a double
// sum. fp32 products summed over k = 70 terms of size about 1 (normal values): the rounding error
// is at most about k * 2^-24 times the sum of |terms|, so 70 * 6e-8 * sum|terms| bounds it.
TEST_F(Blas, TilesMakeUpTheWholeProduct) {
  for (cublasOperation_t transa : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t transb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const Problem p{transa, transb};
      const auto A = random_values(p.batch * p.stride_a(), 4), B = random_values(p.batch * p.stride_b(), 5),
                 C = random_values(p.batch * p.stride_c(), 6);
      const std::vector<float> result = gemm(p, 2, A, B, C);
      int wrong = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int j = 0; j < p.n; ++j)
          for (int i = 0; i < p.m; ++i) {
            const size_t at = b * p.stride_c() + (size_t)j * p.m + i;
            double sum = C[at], magnitude = std::fabs(C[at]);
            for (int l = 0; l < p.k; ++l) {
              const double term = double(p.a(b, i, l, A)) * p.b(b, l, j, B);
              sum += term;
              magnitude += std::fabs(term);
            }
            wrong += std::fabs(result[at] - sum) > (p.k + 1) * 6e-8 * magnitude;
          }
      EXPECT_EQ(wrong, 0) << "elements off their double sum, transa " << transa << ", transb " << transb;
    }
}

// Under strict memory only a stream operation's threads may touch its device's memory: the
// helpers run tiles as part of the GEMM's operation, so they may, and the result is complete.
TEST_F(Blas, HelperThreadsMayTouchTheDevicesMemoryUnderStrictMemory) {
  cpu::settings().strict_memory = true;
  const Problem p{CUBLAS_OP_T, CUBLAS_OP_N};
  const auto A = random_values(p.batch * p.stride_a(), 7), B = random_values(p.batch * p.stride_b(), 8),
             C = random_values(p.batch * p.stride_c(), 9);
  const std::vector<float> strict = gemm(p, 2, A, B, C);
  cpu::settings().strict_memory = false;
  const std::vector<float> plain = gemm(p, 1, A, B, C);
  EXPECT_EQ(std::memcmp(strict.data(), plain.data(), plain.size() * sizeof(float)), 0);
}

// TF32 (cpu/blas/cublas.cpp, cpu/blas/gemm_operands.cpp): with CUBLAS_COMPUTE_32F_FAST_TF32 each input is rounded to 10 explicit
// mantissa bits, to nearest with ties away from zero (PTX's cvt.rna.tf32.f32). Multiplying by
// 1 shows each rounded value bitwise: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10, so ties to
// even would give 1 and a truncation 1 as well; 1 + 3 2^-11 lies halfway between 1 + 2^-10 and
// 1 + 2^-9.
TEST_F(Blas, Tf32RoundsEachInputToNearestWithTiesAwayFromZero) {
  const float u = std::ldexp(1.0f, -11), tiny = std::ldexp(1.0f, -23);
  const std::vector<std::pair<float, float>> cases = {
      {1 + u, 1 + 2 * u},         {-(1 + u), -(1 + 2 * u)}, {1 + u - tiny, 1},  {1 + u + tiny, 1 + 2 * u},
      {1 + 3 * u, 1 + 4 * u},     {1 + 2 * u, 1 + 2 * u},   {-(1 + 3 * u), -(1 + 4 * u)},
      {0.375f * (1 + u), 0.375f + std::ldexp(1.0f, -12)},  // 0.75 of its unit, 2^-12, above 0.375
      {INFINITY, INFINITY},
  };
  std::vector<float> in, want;
  for (const auto& [value, rounded] : cases) {
    in.push_back(value);
    want.push_back(rounded);
  }
  const int m = int(in.size());
  DeviceBuffer<float> a(in), b(std::vector<float>{1.0f}), c(std::vector<float>(m, 0.0f));
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, 1, 1, &one, a.data(), CUDA_R_32F, m, b.data(),
                            CUDA_R_32F, 1, &zero, c.data(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F_FAST_TF32,
                            CUBLAS_GEMM_DEFAULT));
  const std::vector<float> got = c.to_host();
  for (int i = 0; i < m; ++i)
    EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "input " << in[i] << " (" << std::hexfloat << in[i] << "): got " << got[i] << ", want " << want[i]
        << std::defaultfloat;
}

// TF32's rounding computed another way: in double, to the nearest multiple of the unit of an
// 11-significant-bit value of x's binade (below fp32's smallest normal, the unit of that binade),
// ties away from zero; NaN and infinities kept, and a value that rounds past the largest finite
// float becomes infinity.
float tf32_by_arithmetic(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  int exponent;
  std::frexp(x, &exponent);  // |x| in [2^(exponent - 1), 2^exponent)
  const double unit = std::ldexp(1.0, std::max(exponent, -125) - 11);
  return float(std::copysign(std::floor(std::fabs(double(x)) / unit + 0.5) * unit, double(x)));
}

// The rounding takes every kind of value alike wherever it sits in a column (the copy rounds
// four elements at a time, then the rest one by one): 83 rows, each of the special values below
// at many positions, random bit patterns between them, against tf32_by_arithmetic bitwise (any
// NaN for a NaN: the product by 1 may quiet it; either zero for a zero: the GEMM's sum starts at +0).
TEST_F(Blas, Tf32RoundsEveryKindOfValueAtAnyPositionOfAColumn) {
  const uint32_t special[] = {
      0x7f800000u, 0xff800000u,  // infinities
      0x7fc00000u, 0x7fffffffu, 0xffffffffu, 0x7f801fffu,  // NaNs, with payloads in the dropped bits
      0x7f7fffffu, 0xff7ff000u,  // the largest finite floats, which round to infinity
      0x7f7fefffu, 0x00001000u, 0x80000fffu, 0x00000001u, 0x007ff000u,  // below the tie, subnormal ties
      0x3f801000u, 0xbf803000u, 0x80000000u, 0x00000000u,  // ties away from zero, zeros
  };
  const int rows = 83, columns = 7;
  std::mt19937 generator(12);
  std::vector<float> in(rows * columns);
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t bits = i % 3 == 0 ? special[i / 3 % std::size(special)] : uint32_t(generator());
    std::memcpy(&in[i], &bits, sizeof bits);
  }
  DeviceBuffer<float> a(in), b(std::vector<float>{1.0f}), c(std::vector<float>(in.size(), 0.0f));
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, rows, 1, 1, &one, a.data(), CUDA_R_32F,
                                          rows, rows, b.data(), CUDA_R_32F, 1, 0, &zero, c.data(), CUDA_R_32F, rows,
                                          rows, columns, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
  const std::vector<float> got = c.to_host();
  int wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const float want = tf32_by_arithmetic(in[i]);
    const bool same = std::isnan(want)  ? std::isnan(got[i])
                      : want == 0.0f    ? got[i] == 0.0f
                                        : std::memcmp(&got[i], &want, sizeof want) == 0;
    if (!same && ++wrong <= 5)
      ADD_FAILURE() << "element " << i % rows << " of column " << i / rows << ": " << std::hexfloat << in[i]
                    << " rounded to " << got[i] << ", want " << want << std::defaultfloat;
  }
  EXPECT_EQ(wrong, 0);
}

// A random TF32 value (11 significant bits), and that value moved by less than an eighth of its
// last bit's unit (a quarter of the unit below a power of two): the TF32 rounding of the moved
// value is the value, whichever way ties go. tf32 holds the values, moved the moved ones.
void tf32_and_moved(size_t count, unsigned seed, std::vector<float>& tf32, std::vector<float>& moved) {
  std::mt19937 generator(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> eighth(-0.125, 0.125);
  tf32.resize(count);
  moved.resize(count);
  for (size_t i = 0; i < count; ++i) {
    int exponent;
    const double fraction = std::frexp(normal(generator), &exponent);  // in [0.5, 1)
    const double value = std::ldexp(std::round(std::ldexp(fraction, 11)), exponent - 11);
    std::frexp(value, &exponent);
    tf32[i] = float(value);
    moved[i] = float(value + eighth(generator) * std::ldexp(1.0, exponent - 11));
  }
}

// A TF32 GEMM of inputs with low mantissa bits set is the fp32 GEMM of the inputs rounded to TF32:
// within fp32 accumulation's error of the double product of the rounded inputs. A product of two
// TF32 values (11 significant bits each) is exact in fp32, so only the k - 1 = 69 additions round:
// at most (k + 1) 2^-24 times the sum of |terms| (as TilesMakeUpTheWholeProduct). The same GEMM in
// full fp32 multiplies the unrounded inputs, up to 2^-14 away per factor, and misses that bound in
// most entries (measured: 2213 of 2970, 75%); on a handle in CUBLAS_TF32_TENSOR_OP_MATH, cublasSgemm's
// strided batch rounds as CUBLAS_COMPUTE_32F_FAST_TF32 does, to the bit.
TEST_F(Blas, Tf32GemmIsTheFp32GemmOfTheInputsRoundedToTf32) {
  Problem p{CUBLAS_OP_T, CUBLAS_OP_N};
  p.m = 45;
  p.n = 33;
  std::vector<float> A_tf32, A, B_tf32, B;
  tf32_and_moved(p.batch * p.stride_a(), 10, A_tf32, A);
  tf32_and_moved(p.batch * p.stride_b(), 11, B_tf32, B);
  const std::vector<float> zeros(p.batch * p.stride_c(), 0.0f);
  auto gemm_ex = [&](cublasComputeType_t compute) {
    DeviceBuffer<float> a(A), b(B), c(zeros);
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_, p.transa, p.transb, p.m, p.n, p.k, &one, a.data(), CUDA_R_32F,
                                            p.lda(), p.stride_a(), b.data(), CUDA_R_32F, p.ldb(), p.stride_b(), &zero,
                                            c.data(), CUDA_R_32F, p.m, p.stride_c(), p.batch, compute,
                                            CUBLAS_GEMM_DEFAULT));
    return c.to_host();
  };
  const std::vector<float> tf32 = gemm_ex(CUBLAS_COMPUTE_32F_FAST_TF32), fp32 = gemm_ex(CUBLAS_COMPUTE_32F);
  size_t tf32_off = 0, fp32_off = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.n; ++j)
      for (int i = 0; i < p.m; ++i) {
        double sum = 0, magnitude = 0;
        for (int l = 0; l < p.k; ++l) {
          const double term = double(p.a(b, i, l, A_tf32)) * p.b(b, l, j, B_tf32);
          sum += term;
          magnitude += std::fabs(term);
        }
        const size_t at = b * p.stride_c() + (size_t)j * p.m + i;
        const double bound = (p.k + 1) * std::ldexp(1.0, -24) * magnitude;
        tf32_off += std::fabs(tf32[at] - sum) > bound;
        fp32_off += std::fabs(fp32[at] - sum) > bound;
      }
  EXPECT_EQ(tf32_off, 0u) << "TF32 entries off the double product of the rounded inputs";
  EXPECT_GT(fp32_off, tf32.size() / 2) << "full fp32 entries off it: the inputs' low bits should count there";

  CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_TF32_TENSOR_OP_MATH));
  EXPECT_EQ(std::memcmp(gemm(p, 2, A, B, zeros).data(), tf32.data(), tf32.size() * sizeof(float)), 0)
      << "cublasSgemmStridedBatched in CUBLAS_TF32_TENSOR_OP_MATH";
}

TEST_F(Blas, OpenBlasRunsTheKernelSetTheSettingsName) {
  const std::string& asked = cpu::settings().blas_core;
  const std::string& running = cpu::blas_library().core;
  if (asked == "auto")
    EXPECT_FALSE(running.empty()) << "CUDA_CPU_BLAS_CORE=auto: OpenBLAS's own choice has a name";
  else
    EXPECT_EQ(strcasecmp(asked.c_str(), running.c_str()), 0) << "asked for " << asked << ", running " << running;
}

// A kernel set OpenBLAS does not run (a misspelt name, or one this CPU lacks the instructions
// for) ends the process in one line, before any GEMM could give other bits than asked for.
TEST_F(Blas, AKernelSetOpenBlasDoesNotRunEndsTheProcessNamingIt) {
  EXPECT_EXIT(
      {
        cpu::settings().blas_core = "NoSuchCore";
        cpu::blas_library();
      },
      testing::ExitedWithCode(1), "cpu: OpenBLAS: CUDA_CPU_BLAS_CORE=NoSuchCore but OpenBLAS runs its [A-Za-z0-9]+ kernels");
}

}  // namespace
