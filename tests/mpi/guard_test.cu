// The non-finite guard across ranks (trainer/step/trainer.h's train_step, trainer/safety/nonfinite.h).
// Its gradient half: a NaN written into one stage's gradient (TRAIN_TEST_NAN, trainer/safety/
// failure_injection.h) makes every rank of every layout skip the step and name the same first
// non-finite tensor and stage. Its loss half: a NaN written into one head stage's loss sum
// (TRAIN_TEST_NAN=...,tensor=loss), with every gradient finite, makes every rank skip the step and
// say "non-finite loss": only the count of ranks with a non-finite loss (optimizer.h's
// queue_step_gate) can skip it, since the norm is finite and the stages without the head never see
// a loss. Either way every rank leaves its parameters and AdamW moments bitwise as they were, and
// the next step is applied again. Under mpirun -np 4, on pipeline_harness.h's tiny model (4 layers).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/mpi/pipeline_harness.h"
#include "trainer/checkpoints/gather_model.h"

namespace {

using namespace pipeline_harness;

// Three steps on the layout: the first clean, the second with TRAIN_TEST_NAN=injection, the third
// clean; and whether the second left parameters and moments bitwise as they were.
struct ThreeSteps {
  StepResult first, skipped, next;
  bool parameters_unchanged, moments_unchanged;
};
ThreeSteps three_steps_with_a_nan(int dp, int pp, const std::string& injection, int tp = 1) {
  WorldGroups world(dp, pp, tp);
  const GPTConfig config = config_of(4);
  Trainer<float> trainer =
      create_trainer<float>(config, kB, kT, {ScheduleKind::one_f_one_b, 4, 1, false, {}}, world.groups);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);

  ThreeSteps steps;
  steps.first = train_step(trainer, reader, kSettings, kLearningRate, 1);
  const std::vector<float> parameters = gather_parameters(trainer);
  std::vector<float> m, v;
  gather_moments(trainer, m, v);
  setenv("TRAIN_TEST_NAN", injection.c_str(), 1);
  steps.skipped = train_step(trainer, reader, kSettings, kLearningRate, 2);
  unsetenv("TRAIN_TEST_NAN");
  std::vector<float> m_after, v_after;
  gather_moments(trainer, m_after, v_after);
  steps.parameters_unchanged = gather_parameters(trainer) == parameters;
  steps.moments_unchanged = m_after == m && v_after == v;
  steps.next = train_step(trainer, reader, kSettings, kLearningRate, 3);
  destroy_trainer(trainer);
  return steps;
}

void expect_skipped_and_recovered(const ThreeSteps& steps) {
  EXPECT_TRUE(steps.first.applied);
  EXPECT_FALSE(steps.skipped.applied);
  EXPECT_TRUE(steps.parameters_unchanged) << "the skipped step changed parameters";
  EXPECT_TRUE(steps.moments_unchanged) << "the skipped step changed the moments";
  EXPECT_TRUE(steps.next.applied);
  EXPECT_TRUE(std::isfinite(steps.next.loss) && std::isfinite(steps.next.grad_norm));
}

// The NaN in world rank `rank`'s gradient of `tensor` at `layer` (the rank must hold it).
void expect_nan_gradient_skipped_everywhere(int dp, int pp, int rank, int layer, int expected_stage, int tp = 1,
                                            const std::string& tensor = "fcw") {
  const ThreeSteps steps = three_steps_with_a_nan(
      dp, pp, "rank=" + std::to_string(rank) + ",step=2,tensor=" + tensor + ",layer=" + std::to_string(layer), tp);
  expect_skipped_and_recovered(steps);
  EXPECT_TRUE(std::isnan(steps.skipped.grad_norm));
  EXPECT_EQ(steps.skipped.skipped, "non-finite gradient (first in stage " + std::to_string(expected_stage) +
                                       ", tensor " + tensor + " layer " + std::to_string(layer) + ")");
}

// The NaN in world rank `rank`'s loss sum (a stage with the head).
void expect_nan_loss_skipped_everywhere(int dp, int pp, int rank, int tp = 1) {
  const ThreeSteps steps =
      three_steps_with_a_nan(dp, pp, "rank=" + std::to_string(rank) + ",step=2,tensor=loss", tp);
  expect_skipped_and_recovered(steps);
  EXPECT_TRUE(std::isnan(steps.skipped.loss));
  EXPECT_TRUE(std::isfinite(steps.skipped.grad_norm)) << "the gradients were not meant to see the NaN";
  EXPECT_EQ(steps.skipped.skipped, "non-finite loss");
}

}  // namespace

// 4 stages of one layer each: stage 2 holds layer 2.
TEST(NonFiniteGuard, NanInOneStageIsSkippedByEveryStageAndNamed) { expect_nan_gradient_skipped_everywhere(1, 4, 2, 2, 2); }

// 2 replicas of 2 stages: world rank 3 is replica 1's stage 1 (layers 2 and 3); the data-parallel
// sum carries the NaN to replica 0.
TEST(NonFiniteGuard, NanInOneReplicaIsSkippedByEveryReplica) { expect_nan_gradient_skipped_everywhere(2, 2, 3, 3, 1); }

// 4 stages of one layer each: world rank 3 holds the head; ranks 0 to 2 have no loss of their own.
TEST(NonFiniteGuard, NanLossOnTheLastStageIsSkippedByEveryStage) { expect_nan_loss_skipped_everywhere(1, 4, 3); }

// 2 replicas of 2 stages: world rank 3 is replica 1's last stage; replica 0's losses are finite.
TEST(NonFiniteGuard, NanLossInOneReplicaIsSkippedByEveryReplica) { expect_nan_loss_skipped_everywhere(2, 2, 3); }

// Tensor parallelism, tp 2 x pp 2 (world rank = pp_rank * 2 + tp_rank; stage 0 holds layers 0 and
// 1, stage 1 layers 2 and 3 and the head): a NaN on tp rank 1 alone. In its slice of fcw: the
// norm's slots are summed over tp, so every rank sees it.
TEST(NonFiniteGuard, NanInOneTpRanksSliceIsSkippedByEveryRankAndNamed) {
  expect_nan_gradient_skipped_everywhere(1, 2, 1, 1, 0, 2);
}

// In a replicated tensor (ln1w) of tp rank 1, which the norm's sum counts from tp rank 0 only.
TEST(NonFiniteGuard, NanInOneTpRanksReplicatedTensorIsSkippedByEveryRankAndNamed) {
  expect_nan_gradient_skipped_everywhere(1, 2, 3, 2, 1, 2, "ln1w");
}

// In the loss sum of the head stage's tp rank 1, whose loss the step's mean does not count.
TEST(NonFiniteGuard, NanLossOnOneTpRankIsSkippedByEveryRank) { expect_nan_loss_skipped_everywhere(1, 2, 3, 2); }
