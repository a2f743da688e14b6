// What a training step asks of each rank's device, counted by the CPU build (cpu/runtime/call_counts.h)
// on every rank of several layouts of the pipeline tests' tiny model (tests/mpi/pipeline_harness.h):
// the host waits once per step, and AdamW is one launch per stage whatever its number of
// regions. CPU build only (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4): the counts are
// the CPU runtime's. Steps after the first: the first allocates its activation slots.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cpu/runtime/call_counts.h"
#include "tests/cpu/mpi/counted_step.h"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

// The layouts of a 4-rank world the counts are checked on: every schedule family, recompute,
// replicas, and bf16 with master weights.
std::vector<Case> cases_of_world() {
  return {{1, 4, ScheduleKind::one_f_one_b, 1, false, 8, 4},
          {1, 4, ScheduleKind::afab, 1, true, 4, 4},
          {2, 2, ScheduleKind::interleaved, 2, true, 4, 4},
          {1, 4, ScheduleKind::zb_v, 2, false, 5, 8},
          {4, 1, ScheduleKind::one_f_one_b, 1, false, 2, 2},
          {2, 2, ScheduleKind::one_f_one_b, 1, false, 3, 4, {}, true}};
}

struct CountedStep {
  cpu::CallCounts step;   // the whole train_step
  cpu::CallCounts adamw;  // queue_adamw_update alone
  cpu::CallCounts norm;   // queue_gradient_norm alone
};

// Step 2 of the case, counted; then one more norm and AdamW update, each counted alone (the
// calls train_step makes, on the trainer's own optimizer).
template <typename Element>
CountedStep count_in(const Case& c, const CommGroups& groups) {
  Trainer<Element> trainer = counted_step::trainer_of<Element>(c, groups);
  CountedStep counts;
  counts.step = counted_step::second_step_calls(trainer);
  const cpu::CallCounts before_norm = cpu::call_counts();
  queue_gradient_norm(trainer.optimizer, trainer.groups, trainer.gradient_memory, trainer.stream);
  counts.norm = counted_step::difference(cpu::call_counts(), before_norm);
  const cpu::CallCounts before_adamw = cpu::call_counts();
  queue_adamw_update(trainer.optimizer, trainer.parameter_memory, trainer.gradient_memory, kSettings, kLearningRate,
                     3, trainer.stream);
  counts.adamw = counted_step::difference(cpu::call_counts(), before_adamw);
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));
  EXPECT_GT(trainer.optimizer.regions.size(), size_t(4)) << "a stage of several regions";
  destroy_trainer(trainer);
  return counts;
}

}  // namespace

// Each case's counts, taken once for both tests (a counted step is the suite's whole cost).
class StepCounts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    counted = new std::vector<CountedStep>;
    for (const Case& c : cases_of_world()) {
      WorldGroups world(c.dp, c.pp);
      counted->push_back(c.bf16 ? count_in<__nv_bfloat16>(c, world.groups) : count_in<float>(c, world.groups));
    }
  }
  static void TearDownTestSuite() {
    delete counted;
    counted = nullptr;
  }
  static std::vector<CountedStep>* counted;  // parallel to cases_of_world()
};
std::vector<CountedStep>* StepCounts::counted = nullptr;

// One host wait per training step on every rank: the step's figures (its loss sum, the norm, the
// decision to apply it) copied back at its end. The losses are summed, the norm and the clipping
// factor computed and the non-finite guard decided on the device; the stop signals and the loss
// over the ranks are summed on the host after the wait (MPI between hosts, no device work).
TEST_F(StepCounts, OneHostWaitPerTrainingStepOnEveryRank) {
  const std::vector<Case> cases = cases_of_world();
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ((*counted)[i].step.host_waits, 1u) << describe(cases[i]) << ", rank " << rank_in_world();
}

// The same one wait with microbatches of B T = 16512 tokens, whose token ids (and targets) are
// 66048 bytes: above 64 KB CUDA may make a copy from pageable host memory wait for its stream
// ("API synchronization behavior"; the CPU build waits, pageable_copies_test.cu), so the trainer
// keeps them in pinned memory. From std::vector a stage would wait once more per microbatch for
// its tokens (with the embedding) and once more for its targets (with the head).
TEST_F(StepCounts, OneHostWaitPerTrainingStepWithMicrobatchesAboveSixtyFourKilobytes) {
  constexpr int kLargeB = 2064;
  static_assert(size_t(kLargeB) * kT * sizeof(int) > (64 << 10), "a microbatch's token ids above 64 KB");
  const Case c{4, 1, ScheduleKind::one_f_one_b, 1, false, 1, 1};  // one layer, one microbatch: the cheapest step
  TokenDataset data;
  std::mt19937_64 generator(11);
  for (size_t i = 0; i < size_t(kLargeB) * kT * c.m + 1; ++i) data.tokens.push_back(uint16_t(generator() % 64));
  data.vocab_size = 64;
  data.source = "random tokens";
  WorldGroups world(c.dp, c.pp);
  Trainer<float> trainer = counted_step::trainer_of<float>(c, world.groups, kLargeB);
  const cpu::CallCounts step = counted_step::second_step_calls(trainer, data);
  destroy_trainer(trainer);
  EXPECT_EQ(step.host_waits, 1u) << describe(c) << " B " << kLargeB << ", rank " << rank_in_world();
}

// AdamW over all of a stage's regions (decay per region from a table) is one launch; the norm
// three: the regions' partial sums in two (kernels/global_norm.cuh's table), the total over the
// gathered slots in one.
TEST_F(StepCounts, AdamWIsOneLaunchAndTheNormThreePerStage) {
  const std::vector<Case> cases = cases_of_world();
  for (size_t i = 0; i < cases.size(); ++i) {
    const CountedStep& counts = (*counted)[i];
    EXPECT_EQ(counts.adamw.launches, 1u) << describe(cases[i]) << ", rank " << rank_in_world();
    EXPECT_EQ(counts.adamw.host_waits, 0u) << describe(cases[i]) << ", rank " << rank_in_world();
    EXPECT_EQ(counts.norm.launches, 3u) << describe(cases[i]) << ", rank " << rank_in_world();
  }
}
