// PipeDream's asynchronous pipeline on every rank of the world, one stage each (p = 2, 4 or 8 by
// mpirun's -np: tools/run_tests.sh runs PipelineLayouts.* at each), or replicas of 2 stages (dp =
// the world / 2), several steps, bitwise equal to
// the one-process reference of its rule (tests/pipedream_reference.h): each step's loss and the
// parameters after the last update, the tied copy of wte on the last stage among them; and the
// run's device peak, which is its memory plan to the byte (the stashes, the ring; with
// --recompute one working set instead of each slot's activations). Both run
// fp32, or bf16 with the same stochastic rounding, on the same kernels in the same order of
// additions, so nothing but a version taken wrong (or a rounding keyed otherwise) can move a bit.
// Kept in the PipelineLayouts suite for those modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>
#include <string>
#include <type_traits>
#include <vector>

#include "pipeline/pipedream.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/pipedream_reference.h"

namespace {

using namespace pipeline_harness;

// No clipping (pipedream clips only with vertical sync); and a clip every update of the tiny
// model exceeds (its norms are above 0.5 over these 3 steps: the clipped tests check it).
const AdamWSettings kUnclipped{0.9, 0.95, 1e-8, 0.1, 0.0};
const AdamWSettings kClipped{0.9, 0.95, 1e-8, 0.1, 0.05};
constexpr int kLayers = 8, kM = 4, kSteps = 3;

struct PipeDreamOutcome {
  std::vector<double> losses;
  std::vector<StepResult> steps;
  std::vector<float> parameters;  // llm.c's layout, zeros outside the rank's stage
  std::vector<ParameterRegion> regions;
  int recomputed = 0;  // the stage's backwards that ran their forward again, over the run
};

template <typename Element = float>
PipeDreamOutcome run_pipeline(const PipeDreamRule& rule, const CommGroups& groups, const AdamWSettings& settings,
                              const MixedPrecision& precision, const std::vector<int>& drains, bool recompute) {
  const GPTConfig config = config_of(kLayers);
  PipelineLayout layout{ScheduleKind::one_f_one_b, kM, 1, recompute, {}};
  layout.pipedream = PipeDreamLayout{rule, kSteps, drains};
  const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
  const StageMemoryPlan plan =
      plan_memory(memory_plan_input(config, kB, kT, layout, groups.mesh, bf16, precision))[groups.mesh.pp_rank];
  reset_device_memory_peak();
  const size_t bytes_before = device_memory_counts().bytes_in_use;
  Trainer<Element> trainer = create_trainer<Element>(config, kB, kT, layout, groups, precision);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  PipeDreamOutcome outcome;
  for (int t = 1; t <= kSteps; ++t) {
    outcome.steps.push_back(train_step(trainer, reader, settings, kLearningRate, t));
    outcome.losses.push_back(outcome.steps.back().loss);
    for (const ExecutedStep& executed : trainer.executor.trace) outcome.recomputed += executed.recomputed ? 1 : 0;
  }
  // The memory plan, stashes and the head's ring included, is the run's peak to the byte.
  EXPECT_EQ(device_memory_counts().peak_bytes - bytes_before, plan.peak_bytes)
      << "stage " << groups.mesh.pp_rank << "'s measured peak against its memory plan";
  outcome.parameters = download_parameters(trainer);
  outcome.regions = stage_regions(trainer, groups.mesh.pp_rank);
  destroy_trainer(trainer);
  return outcome;
}

// dp replicas of p stages (one rank each, the world dp p), in Element (bf16: dp 1 or 2, the
// reference's), the run's lists cut after each step of drains (--save-every's, --val-every's). With vertical sync, each step's norm is the last update's it decides (trainer.h's
// pipedream_step), and a step is applied when all those are.
template <typename Element = float>
PipeDreamOutcome expect_reference(const PipeDreamRule& rule, int dp, int p, const AdamWSettings& settings = kUnclipped,
                                  const MixedPrecision& precision = {},
                                  std::optional<std::pair<int, size_t>> nan_gradient = {},
                                  const std::vector<int>& drains = {}, bool recompute = false) {
  WorldGroups world(dp, p);
  SCOPED_TRACE("dp " + std::to_string(dp) + " p " + std::to_string(p) + " K " + std::to_string(rule.update_every) +
               (rule.weight_stashing ? " stashing" : " no stashing") + (rule.vertical_sync ? " vertical sync" : "") +
               " clip " + std::to_string(settings.grad_clip) + (drains.empty() ? "" : " drained") +
               (recompute ? " recompute" : ""));
  const GPTConfig config = config_of(kLayers);
  const pipedream_reference::Run expected = pipedream_reference::run<Element>(
      config, kB, kT, p, kM, kSteps, rule, settings, kLearningRate, initial_parameters(config),
      make_batch_reader(dataset(), kB, kT, false, 1), dp, drains, precision, nan_gradient);
  const PipeDreamOutcome outcome = run_pipeline<Element>(rule, world.groups, settings, precision, drains, recompute);
  EXPECT_EQ(outcome.losses, expected.losses);
  // The updates each step decides: those whose last microbatch it runs, but the cool-down's (no
  // forward uses them), which the last step decides at its end (pipeline/pipedream_run.h).
  std::vector<std::vector<int>> decided(kSteps);
  if (rule.vertical_sync && !drains.empty()) ADD_FAILURE() << "the decided updates below know no drain";
  for (int v = 1; rule.vertical_sync && v <= kSteps * kM / rule.update_every; ++v)
    decided[pipedream_decided_at_end(rule, p, kM, kSteps, v) ? kSteps - 1 : (v * rule.update_every - 1) / kM]
        .push_back(v);
  for (int t = 1; t <= kSteps; ++t) {
    const StepResult& step = outcome.steps[size_t(t - 1)];
    const std::vector<int>& updates = decided[size_t(t - 1)];
    EXPECT_EQ(step.has_norm, !updates.empty()) << "step " << t;
    if (updates.empty()) continue;
    EXPECT_EQ(step.grad_norm, expected.norms[size_t(updates.back() - 1)])
        << "step " << t << "'s norm, update " << updates.back() << "'s";
    bool applied = true;
    for (int v : updates) applied = applied && expected.applied[size_t(v - 1)];
    EXPECT_EQ(step.applied, applied) << "step " << t << ": " << step.skipped;
  }
  for (const ParameterRegion& r : outcome.regions) {
    const auto got = outcome.parameters.begin() + r.full_offset;
    const auto want = expected.parameters.begin() + r.full_offset;
    EXPECT_TRUE(std::equal(got, got + r.count, want))
        << parameter_tensor_name(r.tensor) << (r.tied_copy ? " (the tied copy)" : "") << " at " << r.full_offset
        << " differs from the reference's after the last update";
  }
  return outcome;
}

void expect_reference(const PipeDreamRule& rule) { expect_reference(rule, 1, size_of_world()); }

// Vertical sync with a clip every update exceeds, on p stages and with replicas: bitwise the
// reference's clipping by the norm over every stage (the replicas' sum).
void expect_clipped_reference(int dp, int p) {
  const GPTConfig config = config_of(kLayers);
  const pipedream_reference::Run expected =
      pipedream_reference::run(config, kB, kT, p, kM, kSteps, {1, true, true}, kClipped, kLearningRate,
                               initial_parameters(config), make_batch_reader(dataset(), kB, kT, false, 1), dp);
  for (double norm : expected.norms) ASSERT_GT(norm, kClipped.grad_clip) << "an update the test meant to clip was not";
  expect_reference({1, true, true}, dp, p, kClipped);
}

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
TEST(PipelineLayouts, PipeDreamClippedWithVerticalSyncGivesTheReference) { expect_clipped_reference(1, size_of_world()); }
// Replicas of two stages, or at -np 2 two replicas of one stage (as expect_reference_with_replicas).
TEST(PipelineLayouts, PipeDreamClippedReplicasWithVerticalSyncGiveTheReference) {
  const int pp = size_of_world() >= 4 ? 2 : 1;
  expect_clipped_reference(size_of_world() / pp, pp);
}

// The non-finite guard: a NaN in the last stage's gradient of update 5 (step 2's first), written by
// TRAIN_TEST_NAN on that rank only, skips update 5 on every stage (weights and moments as they were,
// the tied copy too), and every other update is applied: every parameter after 3 steps is the
// reference's with update 5 skipped, and one step says so.
TEST(PipelineLayouts, PipeDreamNonFiniteUpdateIsSkippedOnEveryStage) {
  const int p = size_of_world(), layer = kLayers - kLayers / p;  // the last stage's first layer
  const GPTConfig config = config_of(kLayers);
  const size_t element = parameter_tensor_offsets(config)[kFcw] + size_t(layer) * parameter_tensor_sizes(config)[kFcw] / kLayers;
  const std::string injection = "rank=" + std::to_string(p - 1) + ",step=5,tensor=fcw,layer=" + std::to_string(layer);
  setenv("TRAIN_TEST_NAN", injection.c_str(), 1);
  const PipeDreamOutcome outcome = expect_reference({1, true, true}, 1, p, kClipped, {}, std::pair<int, size_t>{5, element});
  unsetenv("TRAIN_TEST_NAN");
  // Step 2 reports it, or at p = 8, where no forward uses update 5, the last step (expect_reference
  // holds each step's report to the updates it decides).
  int skipped_steps = 0;
  for (const StepResult& step : outcome.steps)
    if (!step.applied) {
      skipped_steps += 1;
      EXPECT_EQ(step.skipped, "non-finite gradient norm of update 5, not applied on any stage");
    }
  EXPECT_EQ(skipped_steps, 1);
}

// Without vertical sync: the same NaN (in replica 0) skips update 5 on the last stage only, by its
// own gate (every replica of it alike, on their sum; the other stages apply it and every other
// update), step 2 stops the run naming update 5 and that stage on every rank, and the losses and
// every parameter after 3 steps (the trainer's steps go on; ./train stops) are finite and the
// reference's, whose rule gates each stage's update alike. One stage (p = 1) skips it alone,
// consistently: the step is skipped and the run goes on, as the synchronous guard's.
void expect_own_gate_and_stop(int dp, int p) {
  const int layer = kLayers - kLayers / p;
  const GPTConfig config = config_of(kLayers);
  const size_t element = parameter_tensor_offsets(config)[kFcw] + size_t(layer) * parameter_tensor_sizes(config)[kFcw] / kLayers;
  const std::string injection = "rank=" + std::to_string(p - 1) + ",step=5,tensor=fcw,layer=" + std::to_string(layer);
  setenv("TRAIN_TEST_NAN", injection.c_str(), 1);
  const PipeDreamOutcome outcome =
      expect_reference({1, true, false}, dp, p, kUnclipped, {}, std::pair<int, size_t>{5, element});
  unsetenv("TRAIN_TEST_NAN");
  const std::string stage = std::to_string(p - 1);
  for (size_t t = 0; t < outcome.steps.size(); ++t) {
    const StepResult& step = outcome.steps[t];
    EXPECT_EQ(step.applied, t != 1) << "step " << t + 1;
    EXPECT_EQ(step.skipped, t != 1 ? "" : "non-finite gradient of update 5 on stage " + stage + ", not applied there");
    EXPECT_EQ(step.stop.empty(), t != 1 || p == 1) << "step " << t + 1 << ": " << step.stop;
  }
  if (p > 1) {
    EXPECT_EQ(outcome.steps[1].stop,
              "pipedream: update 5's gradient is not finite on stage " + stage + ", which did not apply it, but "
              "without --vertical-sync the other stages may have (the later ones apply an update before stage " +
              stage + " has its gradient): the stages no longer hold one model, so the run stops without saving; "
              "rerun with --vertical-sync, which skips such an update on every stage");
  }
  for (const ParameterRegion& r : outcome.regions)
    EXPECT_TRUE(std::all_of(outcome.parameters.begin() + r.full_offset,
                            outcome.parameters.begin() + r.full_offset + r.count, [](float x) { return std::isfinite(x); }))
        << parameter_tensor_name(r.tensor) << " holds a non-finite value";
}

TEST(PipelineLayouts, PipeDreamNonFiniteUpdateWithoutVerticalSyncIsSkippedOnItsStageAndStopsTheRun) {
  expect_own_gate_and_stop(1, size_of_world());
}
// Replicas of two stages, or at -np 2 two replicas of one stage (as expect_reference_with_replicas).
TEST(PipelineLayouts, PipeDreamNonFiniteUpdateInReplicasWithoutVerticalSyncIsSkippedOnItsStageAndStopsTheRun) {
  const int pp = size_of_world() >= 4 ? 2 : 1;
  expect_own_gate_and_stop(size_of_world() / pp, pp);
}

TEST(PipelineLayouts, PipeDreamReplicasWithStashingGiveTheReference) {
  expect_reference_with_replicas({1, true, false});
}
TEST(PipelineLayouts, PipeDreamReplicasWithoutStashingGiveTheReference) {
  expect_reference_with_replicas({1, false, false});
}
TEST(PipelineLayouts, PipeDreamReplicasWithVerticalSyncGiveTheReference) {
  expect_reference_with_replicas({1, true, true});
}
// --recompute: each stage but the last keeps only its in-flight microbatches' inputs and runs a
// forward again before its backward, with the version the backward reads (with stashing the
// forward's, from its stash; with vertical sync stage 0's): bitwise the reference's, which keeps
// every activation, so bitwise the run without --recompute; the peak is the plan's (one working
// set, not w_s slots of activations). Without stashing it is refused (trainer/command_line/options.cpp).
template <typename Element = float>
void expect_recomputed_reference(const PipeDreamRule& rule, int dp, int p, const MixedPrecision& precision = {}) {
  const PipeDreamOutcome outcome = expect_reference<Element>(rule, dp, p, kUnclipped, precision, {}, {}, true);
  const int stage = make_mesh(dp, 1, p, size_of_world(), rank_in_world()).pp_rank;
  if (stage < p - 1) {
    EXPECT_GT(outcome.recomputed, 0) << "stage " << stage << " never ran a forward again";
  }
}
// With stashing: K = 1 and 2, and in bf16 (its bf16 reference).
TEST(PipelineLayouts, PipeDreamRecomputingWithStashingGivesTheReference) {
  expect_recomputed_reference({1, true, false}, 1, size_of_world());
  expect_recomputed_reference({2, true, false}, 1, size_of_world());
  expect_recomputed_reference<__nv_bfloat16>({1, true, false}, 1, size_of_world(), {true, 81});
}
TEST(PipelineLayouts, PipeDreamRecomputingWithVerticalSyncGivesTheReference) {
  expect_recomputed_reference({1, true, true}, 1, size_of_world());
}
// Replicas of two stages, or at -np 2 two replicas of one stage (which recomputes nothing).
TEST(PipelineLayouts, PipeDreamRecomputingReplicasGiveTheReference) {
  const int pp = size_of_world() >= 4 ? 2 : 1;
  expect_recomputed_reference({1, true, false}, size_of_world() / pp, pp);
}
// bf16 (the trainer's mixed precision): the stashes bf16, the rounding key (seed, the update's
// AdamW count) at each element's whole-model index, with master weights and without.
TEST(PipelineLayouts, PipeDreamInBf16GivesTheBf16Reference) {
  expect_reference<__nv_bfloat16>({1, true, false}, 1, size_of_world(), kUnclipped, {true, 77});
  expect_reference<__nv_bfloat16>({2, false, false}, 1, size_of_world(), kUnclipped, {false, 78});
}
// Vertical sync's clipping in bf16 (the two helpers' work met here): the norm of each update's
// bf16 gradients over every stage, the clip and the rounding key together, bitwise the reference's.
TEST(PipelineLayouts, PipeDreamClippedInBf16WithVerticalSyncGivesTheBf16Reference) {
  expect_reference<__nv_bfloat16>({1, true, true}, 1, size_of_world(), kClipped, {true, 80});
}
// Two replicas of the world / 2 stages in bf16: each update's sum over them is one bf16 rounding.
TEST(PipelineLayouts, PipeDreamReplicasInBf16GiveTheBf16Reference) {
  expect_reference<__nv_bfloat16>({1, true, false}, 2, size_of_world() / 2, kUnclipped, {true, 79});
}

// Drained after step 1 of 3 (a --save-every or --val-every drain: the step ends with a cool-down,
// the next warms up again, its versions counted on), in bf16 with master weights (the tied copy
// brought to stage 0's version and rounded with its key at the drain) and with two replicas of
// the world / 2 stages, fp32 and bf16: bitwise the reference draining there.
TEST(PipelineLayouts, PipeDreamDrainedInBf16GivesTheBf16ReferenceDrainingThere) {
  expect_reference<__nv_bfloat16>({1, true, false}, 1, size_of_world(), kUnclipped, {true, 81}, {}, {1});
}
TEST(PipelineLayouts, PipeDreamDrainedReplicasGiveTheReferenceDrainingThere) {
  expect_reference({1, true, false}, 2, size_of_world() / 2, kUnclipped, {}, {}, {1});
  expect_reference<__nv_bfloat16>({1, true, false}, 2, size_of_world() / 2, kUnclipped, {true, 82}, {}, {1});
}

}  // namespace
