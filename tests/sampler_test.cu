// Drawing a sample's next token (trainer/program/sampler.h): the coin falls into the cumulative
// softmax of logits / temperature, the generator gives llm.c's draws, and its floats lie
// in [0, 1). Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "trainer/program/sampler.h"

namespace {

// Logits 0, ln 2, ln 3: probabilities 1/6, 2/6, 3/6 at temperature 1; at temperature 1/2
// the weights square, 1/14, 4/14, 9/14.
const std::vector<float> kLogits = {0.0f, float(std::log(2.0)), float(std::log(3.0))};

// A coin, a temperature and the token the coin must draw.
struct Draw {
  float coin;
  double temperature;
  int token;
};

void expect_draws(const std::vector<Draw>& draws) {
  for (const Draw& d : draws)
    EXPECT_EQ(sample_from_logits(kLogits, d.coin, d.temperature), d.token)
        << "coin " << d.coin << ", temperature " << d.temperature;
}

TEST(Sampler, TheCoinFallsIntoTheCumulativeSoftmax) {
  // Cumulative 1/6 = 0.1667, 3/6 = 0.5: coins just either side of each boundary.
  expect_draws({{0.0f, 1.0, 0}, {0.16f, 1.0, 0}, {0.17f, 1.0, 1}, {0.49f, 1.0, 1}, {0.51f, 1.0, 2}, {0.9999f, 1.0, 2}});
}

TEST(Sampler, TemperatureSharpensOrFlattensTheDistribution) {
  // Temperature 1/2, cumulative 1/14 = 0.0714 and 5/14 = 0.3571.
  expect_draws({{0.07f, 0.5, 0}, {0.08f, 0.5, 1}, {0.35f, 0.5, 1}, {0.36f, 0.5, 2}});
  // A very high temperature is nearly uniform (boundaries near 1/3, 2/3); a very low one
  // always takes the largest logit.
  expect_draws({{0.32f, 1e6, 0}, {0.34f, 1e6, 1}, {1e-6f, 1e-3, 2}, {0.5f, 1e-3, 2}});
}

TEST(Sampler, LogitsFarApartDoNotOverflow) {
  // exp(1000) overflows a double: the maximum is subtracted first.
  EXPECT_EQ(sample_from_logits({1000.0f, 0.0f, 999.0f}, 0.5f, 1.0), 0);
  EXPECT_EQ(sample_from_logits({1000.0f, 0.0f, 999.0f}, 0.99f, 1.0), 2);
}

TEST(Sampler, GeneratorGivesLlmCsDrawsFromState1337) {
  // llm.c's sampler starts its xorshift* at rng_state = 1337 (not through our seeding); a
  // fresh generator's first random_u32 draws, and a fresh one's first random_f32 draws as
  // printed with %.9g (within 5e-10 of the float).
  uint64_t state = 1337;
  for (uint32_t expected : {989205090u, 818269915u, 1335155955u}) EXPECT_EQ(random_u32(state), expected);
  state = 1337;
  for (double expected : {0.230317235, 0.19051826, 0.310865164, 0.902659476, 0.684917867})
    EXPECT_NEAR(random_unit_float(state), expected, 1e-9);
}

TEST(Sampler, RandomFloatsLieInTheUnitIntervalAndRepeatFromASeed) {
  uint64_t a = sampler_seed_state(1337), b = sampler_seed_state(1337), c = sampler_seed_state(1338);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, c);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const float x = random_unit_float(a);
    EXPECT_EQ(x, random_unit_float(b));
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
  }
  // The mean of 10,000 uniform draws: standard deviation 0.29 / 100; 0.01 is over 3 of them.
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
}

}  // namespace
