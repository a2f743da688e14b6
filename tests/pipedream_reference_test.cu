// The one-process reference of the asynchronous pipeline (tests/pipedream_reference.h), checked
// against what it must reduce to and against the rule's consequences: one stage updating once a
// step is the synchronous trainer, bitwise (losses and parameters); on 4 stages, stashing, the
// latest weights and vertical sync each train differently from the first update's use on; and
// every version it applies comes from its bookkeeping, not from the trainer. fp32, the layout
// tests' tiny model (L = 4, NH = 2, C = 16, T = 8, B = 2, V = 64) on random tokens.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/pipedream_reference.h"
#include "tests/random_tokens.h"
#include "trainer/step/trainer.h"

namespace {

constexpr int kB = 2, kT = 8, kM = 4, kSteps = 3;
const GPTConfig kConfig = make_gpt_config(4, 2, 16, kT, 64);
// No clipping: the reference's updates do not clip (docs/pipeline.md: pipedream clips with vertical sync only).
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.0};
constexpr double kLearningRate = 3e-3;

std::vector<float> initial_parameters() {
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, kConfig, 1234);
  return parameters;
}

pipedream_reference::Run reference(int p, const PipeDreamRule& rule) {
  return pipedream_reference::run(kConfig, kB, kT, p, kM, kSteps, rule, kSettings, kLearningRate, initial_parameters(),
                                  make_batch_reader(random_tokens(), kB, kT, false, 1));
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// p = 1 holds one microbatch in flight (w_0 = 1), so with K = m every microbatch of step t uses
// version t: the synchronous trainer's step, whose losses and parameters the reference must give
// to the bit (the same kernels, the same accumulation order, AdamW per tensor as the trainer's one
// launch over its regions).
TEST(PipeDreamReference, OneStageUpdatingOnceAStepIsTheSynchronousTrainer) {
  Trainer<float> trainer = create_trainer<float>(kConfig, kB, kT, kM);
  upload_parameters(trainer, initial_parameters());
  BatchReader reader = make_batch_reader(random_tokens(), kB, kT, false, 1);
  std::vector<double> losses;
  for (int t = 1; t <= kSteps; ++t) losses.push_back(train_step(trainer, reader, kSettings, kLearningRate, t).loss);
  const std::vector<float> parameters = download_parameters(trainer);
  destroy_trainer(trainer);

  const pipedream_reference::Run run = reference(1, {kM, true, false});
  EXPECT_EQ(run.losses, losses);
  EXPECT_TRUE(bitwise_equal(run.parameters, parameters));
}

// On 4 stages with an update per microbatch the three rules use different versions from
// microbatch 1 on (stage 3's backward of microbatch 1: version 1 with stashing and without;
// vertical sync: 0; stage 0's backward of microbatch 4: 0 with stashing, 4 without): each run ends
// elsewhere, and none is the one stage's run (whose versions are all the latest).
TEST(PipeDreamReference, StashingLatestWeightsAndVerticalSyncTrainDifferently) {
  const pipedream_reference::Run stashing = reference(4, {1, true, false});
  const pipedream_reference::Run latest = reference(4, {1, false, false});
  const pipedream_reference::Run vertical = reference(4, {1, true, true});
  const pipedream_reference::Run one_stage = reference(1, {1, true, false});
  EXPECT_FALSE(bitwise_equal(stashing.parameters, latest.parameters));
  EXPECT_FALSE(bitwise_equal(stashing.parameters, vertical.parameters));
  EXPECT_FALSE(bitwise_equal(latest.parameters, vertical.parameters));
  EXPECT_FALSE(bitwise_equal(stashing.parameters, one_stage.parameters));
  // Step 1's first microbatch uses version 0 everywhere: the step losses differ only through the rest.
  EXPECT_NE(stashing.losses[1], latest.losses[1]);
}
