// The bf16 optimizer's stochastic rounding through the trainer (trainer/step/optimizer.h): its bits
// change from one optimizer step to the next and with the run's rounding seed. The kernel's tests
// (adamw_test.cu) pass their own keys, so only a test through train_step sees the key the trainer
// makes from (seed, t).
// Every master weight is set halfway between its two bf16 neighbours and the learning rate is 0,
// so each step leaves the master weights as they are and writes each parameter as one fair coin
// flip of its rounding bits: up when the bits are at least 2^15, else down
// (kernels/stochastic_rounding.cuh). Two steps that round alike leave bitwise the same parameters.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "trainer/data/data.h"
#include "trainer/step/trainer.h"

namespace {

const GPTConfig kConfig = make_gpt_config(2, 2, 16, 16, 64);
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 1.0};

float float_of_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Master weights of magnitude in [0.25, 1) with either sign, each exactly halfway between two bf16
// values: a bf16 value (the low 16 bits zero) plus half its last place (bit 15).
std::vector<float> halfway_master_weights(size_t n) {
  std::mt19937_64 generator(7);
  std::uniform_real_distribution<float> magnitude(0.25f, 1.0f);
  std::vector<float> master(n);
  for (float& value : master) {
    const float x = generator() % 2 ? magnitude(generator) : -magnitude(generator);
    value = float_of_bits((bits_of(x) & 0xffff0000u) | 0x8000u);
  }
  return master;
}

const TokenDataset& tokens() {
  static const TokenDataset data = [] {
    TokenDataset d;
    for (int i = 0; i < 1000; ++i) d.tokens.push_back(uint16_t(i * 7 % 64));
    d.vocab_size = 64;
    return d;
  }();
  return data;
}

// The parameters (widened) after each of optimizer steps 1 .. steps of a bf16 trainer seeded with
// rounding_seed, whose master weights are `master` and learning rate 0.
std::vector<std::vector<float>> parameters_after_steps(uint64_t rounding_seed, const std::vector<float>& master,
                                                       int steps) {
  Trainer<__nv_bfloat16> trainer =
      create_trainer<__nv_bfloat16>(kConfig, 2, 16, 1, MixedPrecision{true, rounding_seed});
  std::vector<float> initial;
  init_gpt2_parameters(initial, kConfig, 1);
  upload_parameters(trainer, initial);
  upload_master_weights(trainer, master);
  BatchReader reader = make_batch_reader(tokens(), 2, 16, false, 1);
  std::vector<std::vector<float>> after;
  for (int t = 1; t <= steps; ++t) {
    EXPECT_TRUE(train_step(trainer, reader, kSettings, 0.0, t).applied) << "step " << t;
    after.push_back(download_parameters(trainer));
  }
  destroy_trainer(trainer);
  return after;
}

// How many elements of a and b differ; fails when an element is not one of master's two bf16
// neighbours (the rounding must be the only change at learning rate 0).
size_t count_differences(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& master) {
  size_t differences = 0;
  for (size_t i = 0; i < master.size(); ++i) {
    const float down = float_of_bits(bits_of(master[i]) & 0xffff0000u);
    const float up = float_of_bits((bits_of(master[i]) & 0xffff0000u) + 0x10000u);
    EXPECT_TRUE((a[i] == down || a[i] == up) && (b[i] == down || b[i] == up))
        << "element " << i << ": " << a[i] << ", " << b[i] << " from master " << master[i];
    if (a[i] != b[i]) ++differences;
  }
  return differences;
}

}  // namespace

// With independent bits, each of the N = 8,896 elements (this model, V = 64 padded to 128) rounds
// alike in two steps with probability 1/2: all alike has probability 2^-N, and the count of
// differing elements is Binomial(N, 1/2), mean N/2, standard deviation sqrt(N)/2 (47). Allowing 6
// deviations either side fails a correct key with probability about 2e-9. The same key every step
// (or a step number that never changes) rounds every element alike: 0 differences.
TEST(OptimizerRounding, ConsecutiveStepsRoundWithDifferentBits) {
  const std::vector<float> master = halfway_master_weights(num_parameters(kConfig));
  const std::vector<std::vector<float>> after = parameters_after_steps(5, master, 3);
  const double n = double(master.size());
  for (int t = 1; t < 3; ++t) {
    SCOPED_TRACE("steps " + std::to_string(t) + " and " + std::to_string(t + 1));
    const size_t differences = count_differences(after[t - 1], after[t], master);
    EXPECT_NEAR(double(differences), n / 2, 6 * std::sqrt(n) / 2) << "of " << master.size() << " elements";
  }
}

// Two runs that differ in the rounding seed alone round step 1 independently (the same bound).
TEST(OptimizerRounding, AnotherSeedRoundsWithDifferentBits) {
  const std::vector<float> master = halfway_master_weights(num_parameters(kConfig));
  const std::vector<float> seeded_5 = parameters_after_steps(5, master, 1)[0];
  const std::vector<float> seeded_6 = parameters_after_steps(6, master, 1)[0];
  const double n = double(master.size());
  EXPECT_NEAR(double(count_differences(seeded_5, seeded_6, master)), n / 2, 6 * std::sqrt(n) / 2)
      << "of " << master.size() << " elements";
}
