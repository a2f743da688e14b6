// The sequence-length warm-up on packed data (issue 34; train_step with a BatchReader and a cap):
// each sequence of the step's window keeps its first cap tokens, so a step at cap is the step of a
// trainer built for T = cap over those tokens, put in its host buffers here by hand. One process,
// a tiny model (L=2, NH=2, C=16, maxT=8, V=128), B = 2, m = 2.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "trainer/data/data.h"
#include "trainer/step/trainer.h"

namespace {

constexpr int kMaxT = 8, kCap = 5, kB = 2, kM = 2;
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 1.0};

TokenDataset counting_text() {
  TokenDataset data;
  for (int i = 0; i < 400; ++i) data.tokens.push_back(uint16_t((i * 37 + i / 7) % 128));
  data.vocab_size = 128;
  data.source = "counting";
  return data;
}

struct StepOutcome {
  StepResult result;
  std::vector<float> gradients;
};

Trainer<float> fresh_trainer(int T) {
  const GPTConfig config = make_gpt_config(2, 2, 16, kMaxT, 128);
  Trainer<float> trainer = create_trainer<float>(config, kB, T, kM);
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, 1234);
  upload_parameters(trainer, parameters);
  return trainer;
}

StepOutcome finish(Trainer<float>& trainer, StepResult result) {
  StepOutcome outcome{result, download_gradients(trainer)};
  destroy_trainer(trainer);
  return outcome;
}

}  // namespace

// Step 1 of a maxT = 8 trainer at cap 5, against a T = 5 trainer given, for microbatch k and row
// b, the inputs data[(k B + b) 8 + j] and targets data[(k B + b) 8 + j + 1], j < 5 (the packed
// window of maxT: row b of microbatch k starts at (k B + b) maxT). The same computation at the
// same T: bitwise.
TEST(PackedWarmUp, StepAtACapIsTheStepOfATrainerAtThatT) {
  const TokenDataset data = counting_text();
  Trainer<float> capped = fresh_trainer(kMaxT);
  BatchReader reader = make_batch_reader(data, kB, kMaxT, false, 1);
  const StepOutcome at_cap = finish(capped, train_step(capped, reader, kCap, kSettings, 1e-3, 1));
  EXPECT_EQ(reader.next_microbatch, uint64_t(kM)) << "the reader advances as at maxT";

  Trainer<float> small = fresh_trainer(kCap);
  for (int k = 0; k < kM; ++k)
    for (int b = 0; b < kB; ++b)
      for (int j = 0; j < kCap; ++j) {
        const size_t at = size_t(k * kB + b) * kMaxT + j, slot = size_t(k) * kB * kCap + size_t(b) * kCap + j;
        small.host_tokens[slot] = data.tokens[at];
        small.host_targets[slot] = data.tokens[at + 1];
      }
  small.shape.lengths.assign(kM, kCap);
  small.shape.loss_scale = 1.0 / (kB * kCap * kM);
  small.shape.loss_divisor = kB * kCap;
  const StepOutcome by_hand = finish(small, run_step(small, kSettings, 1e-3, 1, double(kM)));

  EXPECT_EQ(at_cap.result.real_tokens, kB * kCap * kM);
  EXPECT_EQ(at_cap.result.positions, kB * kCap * kM);
  EXPECT_EQ(at_cap.result.loss, by_hand.result.loss);
  EXPECT_EQ(at_cap.result.grad_norm, by_hand.result.grad_norm);
  EXPECT_EQ(at_cap.gradients, by_hand.gradients);
}

// A cap of 0 or above the trainer's T is refused in one line before anything runs.
TEST(PackedWarmUp, CapOutsideOneToTIsAnError) {
  const TokenDataset data = counting_text();
  Trainer<float> trainer = fresh_trainer(kMaxT);
  BatchReader reader = make_batch_reader(data, kB, kMaxT, false, 1);
  for (size_t cap : {size_t(0), size_t(kMaxT + 1)}) {
    try {
      train_step(trainer, reader, cap, kSettings, 1e-3, 1);
      ADD_FAILURE() << "no error at cap " << cap;
    } catch (const std::runtime_error& error) {
      EXPECT_EQ(std::string(error.what()),
                "train_step: sequence length " + std::to_string(cap) + " is not in [1, T = 8]");
    }
  }
  destroy_trainer(trainer);
}
