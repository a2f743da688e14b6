// The CPU build's expf (cpu/include/kernels/exponential.cuh: glibc's algorithm written out, so that
// loops of it vectorise) has the bits of glibc's __expf_fma, which the machine's libm is on a CPU
// with FMA and AVX2. Exactly equal, no tolerance: the kernels' results must not change. Every
// float is compared by tools/exponential_bench (40 s); here a sample, the edges of its range and
// the two floats where __expf_fma and glibc's other variant (__expf_sse2) differ. CPU build only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/exponential.cuh"

namespace {

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Equal bits, or both NaN (a NaN's payload is not part of expf's contract).
::testing::AssertionResult same_result(float x, float expected) {
  const float got = exponential(x);
  if (bits_of(got) == bits_of(expected) || (std::isnan(got) && std::isnan(expected)))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "e^" << std::hexfloat << x << ": " << got << ", libm " << expected;
}

// The floats where glibc's two variants differ; the libm that is not __expf_fma is the other.
constexpr uint32_t kVariantsDiffer[] = {0x4202422fu /* 0x1.04845ep+5 */, 0xc27c65d9u /* -0x1.f8cbb2p+5 */};

TEST(Exponential, EqualsLibmOnEveryThousandthFloat) {
  int compared = 0;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4099) {
    const uint32_t u = uint32_t(b);
    if (u == kVariantsDiffer[0] || u == kVariantsDiffer[1]) continue;
    ASSERT_TRUE(same_result(float_of(u), expf(float_of(u))));
    ++compared;
  }
  EXPECT_GT(compared, 1000000);
}

// Every float in [-1, 1) at a finer step: the arguments softmax and GELU mostly see.
TEST(Exponential, EqualsLibmNearZero) {
  for (float x = -1.0f; x < 1.0f; x += 0x1p-17f) ASSERT_TRUE(same_result(x, expf(x)));
}

TEST(Exponential, EdgesOfTheRange) {
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                         std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                         0x1.62e42ep6f,  // the largest x with a finite e^x
                         std::nextafter(0x1.62e42ep6f, inf), -0x1.9fe368p6f,  // the least x with e^x > 0
                         std::nextafter(-0x1.9fe368p6f, -inf), 88.0f, -88.0f, -87.5f, -100.0f, -103.9f, 1e10f, -1e10f};
  for (float x : edges) EXPECT_TRUE(same_result(x, expf(x)));
  EXPECT_TRUE(std::isnan(exponential(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exponential(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exponential(inf), inf);
  EXPECT_EQ(bits_of(exponential(-inf)), 0u);
}

// The table of 2^(i/32), each entry less i << 47, against libm's exp2l rounded to double. A wrong
// last bit changes e^x for only a few floats, which no sample finds. exp2l is within an ulp of long
// double (2^-63); the nearest of the 32 values to a midpoint between doubles is 0.0217 of a
// double's ulp (2^-52) from it, 44 times farther, so the rounding of exp2l's value is the true one.
TEST(Exponential, TableIsTwoToTheIOver32) {
  for (int i = 0; i < 32; ++i) {
    const double expected = double(exp2l(i / 32.0L));
    uint64_t expected_bits;
    std::memcpy(&expected_bits, &expected, sizeof expected_bits);
    EXPECT_EQ(cpu::kExp2Table[i] + (uint64_t(i) << 47), expected_bits) << "2^(" << i << "/32)";
  }
}

// Where __expf_fma is 1 ulp from the correctly rounded e^x and __expf_sse2 is not: the written-out
// copy has __expf_fma's bits here whatever the machine's libm is.
TEST(Exponential, HasTheFmaVariantsBitsWhereTheVariantsDiffer) {
  EXPECT_EQ(bits_of(exponential(float_of(kVariantsDiffer[0]))), 0x56fc9f1cu);
  EXPECT_EQ(bits_of(exponential(float_of(kVariantsDiffer[1]))), 0x11fa2993u);
}

}  // namespace
