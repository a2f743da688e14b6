// The non-finite guard's loss half across ranks (trainer/step/trainer.h's train_step): a NaN written
// into one head stage's loss sum (TRAIN_TEST_NAN=...,tensor=loss, trainer/safety/failure_injection.h),
// with every gradient finite, makes every rank of the layout skip the step, say "non-finite loss",
// and leave its parameters and AdamW moments bitwise as they were; the next step is applied again.
// Only the count of ranks with a non-finite loss (optimizer.h's queue_step_gate) can skip this step:
// the norm is finite, and the stages without the head never see a loss. (guard_test.cu has the
// gradient half.) Under mpirun -np 4, on pipeline_harness.h's tiny model (4 layers).
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

// One step clean, one with the NaN in world rank `rank`'s loss sum (a stage with the head), one clean.
void expect_nan_loss_step_skipped_everywhere(int dp, int pp, int rank) {
  WorldGroups world(dp, pp);
  const GPTConfig config = config_of(4);
  Trainer<float> trainer =
      create_trainer<float>(config, kB, kT, {ScheduleKind::one_f_one_b, 4, 1, false, {}}, world.groups);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);

  const StepResult first = train_step(trainer, reader, kSettings, kLearningRate, 1);
  const std::vector<float> parameters = gather_parameters(trainer);
  std::vector<float> m, v;
  gather_moments(trainer, m, v);
  setenv("TRAIN_TEST_NAN", ("rank=" + std::to_string(rank) + ",step=2,tensor=loss").c_str(), 1);
  const StepResult skipped = train_step(trainer, reader, kSettings, kLearningRate, 2);
  unsetenv("TRAIN_TEST_NAN");
  std::vector<float> m_after, v_after;
  gather_moments(trainer, m_after, v_after);
  const std::vector<float> parameters_after = gather_parameters(trainer);
  const StepResult next = train_step(trainer, reader, kSettings, kLearningRate, 3);

  EXPECT_TRUE(first.applied);
  EXPECT_TRUE(std::isnan(skipped.loss));
  EXPECT_TRUE(std::isfinite(skipped.grad_norm)) << "the gradients were not meant to see the NaN";
  EXPECT_FALSE(skipped.applied);
  EXPECT_EQ(skipped.skipped, "non-finite loss");
  EXPECT_TRUE(parameters_after == parameters) << "the skipped step changed parameters";
  EXPECT_TRUE(m_after == m && v_after == v) << "the skipped step changed the moments";
  EXPECT_TRUE(next.applied);
  EXPECT_TRUE(std::isfinite(next.loss) && std::isfinite(next.grad_norm));
  destroy_trainer(trainer);
}

}  // namespace

// 4 stages of one layer each: world rank 3 holds the head; ranks 0 to 2 have no loss of their own.
TEST(NonFiniteGuard, NanLossOnTheLastStageIsSkippedByEveryStage) { expect_nan_loss_step_skipped_everywhere(1, 4, 3); }

// 2 replicas of 2 stages: world rank 3 is replica 1's last stage; replica 0's losses are finite.
TEST(NonFiniteGuard, NanLossInOneReplicaIsSkippedByEveryReplica) { expect_nan_loss_step_skipped_everywhere(2, 2, 3); }

