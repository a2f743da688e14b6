// PipeDream's asynchronous pipeline on every rank of the world, one stage each (p = 2, 4 or 8 by
// mpirun's -np: tools/run_tests.sh runs PipelineLayouts.* at each), or replicas of 2 stages (dp =
// the world / 2), several steps, bitwise equal to
// the one-process reference of its rule (tests/pipedream_reference.h): each step's loss and the
// parameters after the last update, the tied copy of wte on the last stage among them; and the
// run's device peak, which is its memory plan to the byte (the stashes, the ring). Both run
// fp32, or bf16 with the same stochastic rounding, on the same kernels in the same order of
// additions, so nothing but a version taken wrong (or a rounding keyed otherwise) can move a bit.
// Kept in the PipelineLayouts suite for those modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "pipeline/pipedream.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/pipedream_reference.h"

namespace {

using namespace pipeline_harness;

// No clipping: pipedream clips only with vertical sync, and the reference does not clip.
const AdamWSettings kUnclipped{0.9, 0.95, 1e-8, 0.1, 0.0};
constexpr int kLayers = 8, kM = 4, kSteps = 3;

struct PipeDreamOutcome {
  std::vector<double> losses;
  std::vector<float> parameters;  // llm.c's layout, zeros outside the rank's stage
  std::vector<ParameterRegion> regions;
};

template <typename Element>
PipeDreamOutcome run_pipeline(const PipeDreamRule& rule, const CommGroups& groups, const MixedPrecision& precision) {
  const GPTConfig config = config_of(kLayers);
  PipelineLayout layout{ScheduleKind::one_f_one_b, kM, 1, false, {}};
  layout.pipedream = PipeDreamLayout{rule, kSteps};
  const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
  const StageMemoryPlan plan =
      plan_memory(memory_plan_input(config, kB, kT, layout, groups.mesh, bf16, precision))[groups.mesh.pp_rank];
  reset_device_memory_peak();
  const size_t bytes_before = device_memory_counts().bytes_in_use;
  Trainer<Element> trainer = create_trainer<Element>(config, kB, kT, layout, groups, precision);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  PipeDreamOutcome outcome;
  for (int t = 1; t <= kSteps; ++t)
    outcome.losses.push_back(train_step(trainer, reader, kUnclipped, kLearningRate, t).loss);
  // The memory plan, stashes and the head's ring included, is the run's peak to the byte.
  EXPECT_EQ(device_memory_counts().peak_bytes - bytes_before, plan.peak_bytes)
      << "stage " << groups.mesh.pp_rank << "'s measured peak against its memory plan";
  outcome.parameters = download_parameters(trainer);
  outcome.regions = stage_regions(trainer, groups.mesh.pp_rank);
  destroy_trainer(trainer);
  return outcome;
}

// dp replicas of p stages (one rank each, the world dp p), in Element (bf16: dp 1 or 2, the
// reference's).
template <typename Element = float>
void expect_reference(const PipeDreamRule& rule, int dp, int p, const MixedPrecision& precision = {}) {
  WorldGroups world(dp, p);
  SCOPED_TRACE("dp " + std::to_string(dp) + " p " + std::to_string(p) + " K " + std::to_string(rule.update_every) +
               (rule.weight_stashing ? " stashing" : " no stashing") + (rule.vertical_sync ? " vertical sync" : ""));
  const GPTConfig config = config_of(kLayers);
  const pipedream_reference::Run expected = pipedream_reference::run<Element>(
      config, kB, kT, p, kM, kSteps, rule, kUnclipped, kLearningRate, initial_parameters(config),
      make_batch_reader(dataset(), kB, kT, false, 1), dp, {}, precision);
  const PipeDreamOutcome outcome = run_pipeline<Element>(rule, world.groups, precision);
  EXPECT_EQ(outcome.losses, expected.losses);
  for (const ParameterRegion& r : outcome.regions) {
    const auto got = outcome.parameters.begin() + r.full_offset;
    const auto want = expected.parameters.begin() + r.full_offset;
    EXPECT_TRUE(std::equal(got, got + r.count, want))
        << parameter_tensor_name(r.tensor) << (r.tied_copy ? " (the tied copy)" : "") << " at " << r.full_offset
        << " differs from the reference's after the last update";
  }
}

void expect_reference(const PipeDreamRule& rule) { expect_reference(rule, 1, size_of_world()); }

// Replicas of two stages, the world / 2 of them (dp 2 at -np 4, 4 at -np 8), or at -np 2 two
// replicas of one stage: every rank equal to the reference is every replica equal. At dp 2 the
// replicas' sum is one commutative addition, so only at dp 4 could an order of the sum other than
// the reference's show.
void expect_reference_with_replicas(const PipeDreamRule& rule) {
  const int pp = size_of_world() >= 4 ? 2 : 1;
  expect_reference(rule, size_of_world() / pp, pp);
}

TEST(PipelineLayouts, PipeDreamWithStashingGivesTheReference) { expect_reference({1, true, false}); }
TEST(PipelineLayouts, PipeDreamUpdatingEveryTwoGivesTheReference) { expect_reference({2, true, false}); }
TEST(PipelineLayouts, PipeDreamWithoutStashingGivesTheReference) { expect_reference({1, false, false}); }
TEST(PipelineLayouts, PipeDreamWithVerticalSyncGivesTheReference) { expect_reference({1, true, true}); }
TEST(PipelineLayouts, PipeDreamReplicasWithStashingGiveTheReference) {
  expect_reference_with_replicas({1, true, false});
}
TEST(PipelineLayouts, PipeDreamReplicasWithoutStashingGiveTheReference) {
  expect_reference_with_replicas({1, false, false});
}
TEST(PipelineLayouts, PipeDreamReplicasWithVerticalSyncGiveTheReference) {
  expect_reference_with_replicas({1, true, true});
}
// bf16 (the trainer's mixed precision): the stashes bf16, the rounding key (seed, the update's
// AdamW count) at each element's whole-model index, with master weights and without.
TEST(PipelineLayouts, PipeDreamInBf16GivesTheBf16Reference) {
  expect_reference<__nv_bfloat16>({1, true, false}, 1, size_of_world(), {true, 77});
  expect_reference<__nv_bfloat16>({2, false, false}, 1, size_of_world(), {false, 78});
}
// Two replicas of the world / 2 stages in bf16: each update's sum over them is one bf16 rounding.
TEST(PipelineLayouts, PipeDreamReplicasInBf16GiveTheBf16Reference) {
  expect_reference<__nv_bfloat16>({1, true, false}, 2, size_of_world() / 2, {true, 79});
}

}  // namespace
