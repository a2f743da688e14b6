// Specification of stochastic rounding to bf16 (kernels/stochastic_rounding.cuh), on the host,
// where the same functions run as in the AdamW kernel: a value lands on one of its two bf16
// neighbours as the random bits decide, bf16 values and non-finite values are left alone, and
// the bits depend on the key and the index alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>

#include "kernels/stochastic_rounding.cuh"

namespace {

uint16_t bits_of(__nv_bfloat16 value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float float_of_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

// 0x3f80_4000 is 1 + 2^-8 + ..., a quarter of the way from bf16's 1 (0x3f80) to its next value
// (0x3f81): it goes up exactly when the 16 random bits reach the remaining three quarters.
TEST(StochasticRounding, TheRandomBitsDecideBetweenTheTwoNeighbours) {
  const float x = float_of_bits(0x3f804000u);
  EXPECT_EQ(bits_of(round_stochastically(x, 0)), 0x3f80);
  EXPECT_EQ(bits_of(round_stochastically(x, 0xbfff)), 0x3f80);
  EXPECT_EQ(bits_of(round_stochastically(x, 0xc000)), 0x3f81);
  EXPECT_EQ(bits_of(round_stochastically(x, 0xffff)), 0x3f81);
  // The same for -x, in magnitude: away from zero is down.
  EXPECT_EQ(bits_of(round_stochastically(-x, 0xc000)), 0xbf81);
  EXPECT_EQ(bits_of(round_stochastically(-x, 0xbfff)), 0xbf80);
  // Only the low 16 bits of bits count.
  EXPECT_EQ(bits_of(round_stochastically(x, 0x1230000u)), 0x3f80);
}

TEST(StochasticRounding, Bf16ValuesAndNonFiniteValuesStayThemselves) {
  for (const uint32_t bits : {0u, 0xffffu, 0x8000u})
    for (const float value : {1.0f, -0.15625f, 0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()}) {
      EXPECT_EQ(float(round_stochastically(value, bits)), value) << value << " bits " << bits;
      EXPECT_EQ(std::signbit(float(round_stochastically(value, bits))), std::signbit(value));
    }
  // A NaN whose payload sits in the dropped bits stays a NaN (adding to it must not carry it
  // into the sign bit or leave an infinity).
  EXPECT_TRUE(std::isnan(float(round_stochastically(float_of_bits(0x7fffffffu), 0xffff))));
  EXPECT_TRUE(std::isnan(float(round_stochastically(float_of_bits(0x7f800001u), 0xffff))));
}

TEST(StochasticRounding, BitsDependOnTheKeyAndTheIndexAlone) {
  const uint64_t key = rounding_key(1337, 7);
  EXPECT_EQ(rounding_bits(key, 123456), rounding_bits(rounding_key(1337, 7), 123456));
  EXPECT_NE(rounding_key(1337, 7), rounding_key(1337, 8));
  EXPECT_NE(rounding_key(1337, 7), rounding_key(1338, 7));
  // 1000 consecutive indices give (almost) 1000 different 16-bit values: a birthday count of
  // collisions among 1000 draws from 65536 is about 7.6; a key that ignored the index would give
  // one value.
  std::set<uint32_t> values;
  for (uint64_t index = 0; index < 1000; ++index) {
    const uint32_t bits = rounding_bits(key, index);
    EXPECT_LE(bits, 0xffffu);
    values.insert(bits);
  }
  EXPECT_GT(values.size(), 970u);
}
