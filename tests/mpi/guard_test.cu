// The non-finite guard across ranks (trainer/step/trainer.h's train_step, trainer/safety/nonfinite.h): a NaN
// written into one stage's gradient (TRAIN_TEST_NAN, trainer/safety/failure_injection.h) makes every
// rank of every layout skip the step, name the same first non-finite tensor and stage, and leave
// its parameters and AdamW moments bitwise as they were; the next step is applied again.
// Under mpirun -np 4, on pipeline_harness.h's tiny model (4 layers).
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

// One step clean, one with the NaN on world rank `rank` (which must hold fcw of `layer`), one clean.
void expect_nan_step_skipped_everywhere(int dp, int pp, int rank, int layer, int expected_stage) {
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
  const std::string injection =
      "rank=" + std::to_string(rank) + ",step=2,tensor=fcw,layer=" + std::to_string(layer);
  setenv("TRAIN_TEST_NAN", injection.c_str(), 1);
  const StepResult skipped = train_step(trainer, reader, kSettings, kLearningRate, 2);
  unsetenv("TRAIN_TEST_NAN");
  std::vector<float> m_after, v_after;
  gather_moments(trainer, m_after, v_after);
  const std::vector<float> parameters_after = gather_parameters(trainer);
  const StepResult next = train_step(trainer, reader, kSettings, kLearningRate, 3);

  EXPECT_TRUE(first.applied);
  EXPECT_FALSE(skipped.applied);
  EXPECT_TRUE(std::isnan(skipped.grad_norm));
  EXPECT_EQ(skipped.skipped, "non-finite gradient (first in stage " + std::to_string(expected_stage) +
                                 ", tensor fcw layer " + std::to_string(layer) + ")");
  EXPECT_TRUE(parameters_after == parameters) << "the skipped step changed parameters";
  EXPECT_TRUE(m_after == m && v_after == v) << "the skipped step changed the moments";
  EXPECT_TRUE(next.applied);
  EXPECT_TRUE(std::isfinite(next.loss) && std::isfinite(next.grad_norm));
  destroy_trainer(trainer);
}

}  // namespace

// 4 stages of one layer each: stage 2 holds layer 2.
TEST(NonFiniteGuard, NanInOneStageIsSkippedByEveryStageAndNamed) { expect_nan_step_skipped_everywhere(1, 4, 2, 2, 2); }

// 2 replicas of 2 stages: world rank 3 is replica 1's stage 1 (layers 2 and 3); the data-parallel
// sum carries the NaN to replica 0.
TEST(NonFiniteGuard, NanInOneReplicaIsSkippedByEveryReplica) { expect_nan_step_skipped_everywhere(2, 2, 3, 3, 1); }
