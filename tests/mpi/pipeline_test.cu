// The pipeline engine end to end (trainer/trainer.h over pipeline/execute.h), under mpirun -np 4:
// every layout (dp, pp) of 4 ranks, schedule, recompute setting and microbatch count gives the
// loss and gradients of the single-stage run of the same global batch, bitwise without data
// parallelism; the executor allocates the schedule's slots and no more, with recompute each slot
// is the stage input; and the executor runs exactly the printed schedule.
// The model is tiny (L=4, NH=2, C=16, T=8, B=2, V=64; L=8 for the interleaved schedule on 4
// stages) so the whole file runs in about a minute in the CPU build.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "kernels/cuda_check.cuh"
#include "model/config.h"
#include "model/parameters.h"
#include "pipeline/execute.h"
#include "tests/file_tools.h"
#include "pipeline/schedule.h"
#include "trainer/data.h"
#include "trainer/optimizer.h"
#include "trainer/options.h"
#include "trainer/run.h"
#include "trainer/ranks.h"
#include "trainer/trainer.h"

namespace {

constexpr int kWorld = 4;
constexpr int kB = 2, kT = 8;
const GPTConfig kConfig = make_gpt_config(4, 2, 16, kT, 64);
// Clipping at 0.1 is below the tiny model's gradient norm (about 1), so every step clips.
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};
constexpr double kLearningRate = 3e-3;

struct Case {
  int dp, pp;
  ScheduleKind schedule;
  int v;
  bool recompute;
  int m;  // microbatches per replica
};

std::string describe(const Case& c) {
  return "dp " + std::to_string(c.dp) + " pp " + std::to_string(c.pp) + " " + schedule_name(c.schedule) + " v " +
         std::to_string(c.v) + (c.recompute ? " recompute" : "") + " m " + std::to_string(c.m);
}

const TokenDataset& dataset() {
  static const TokenDataset data = [] {
    TokenDataset d;
    std::mt19937_64 generator(7);
    for (int i = 0; i < 4096; ++i) d.tokens.push_back(uint16_t(generator() % 64));
    d.vocab_size = 64;
    d.source = "random tokens";
    return d;
  }();
  return data;
}

std::vector<float> initial_parameters(const GPTConfig& config) {
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, 1234);
  return parameters;
}

struct Outcome {
  std::vector<double> losses;                // per step
  std::vector<float> gradients;              // after step 1, the whole allocation (the rank's regions valid)
  std::vector<ParameterRegion> regions;      // the rank's
  std::string trace, schedule_text;          // step 1's executed steps, and the schedule's text
  ExecutorAccounting accounting;
};

Outcome run(const Case& c, const CommGroups& groups, int steps, const GPTConfig& config = kConfig) {
  const PipelineLayout layout{c.schedule, c.m, c.v, c.recompute, {}};
  Trainer trainer = create_trainer(config, kB, kT, layout, groups);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  Outcome outcome;
  for (int t = 1; t <= steps; ++t) {
    outcome.losses.push_back(train_step(trainer, reader, kSettings, kLearningRate, t).loss);
    if (t == 1) {
      outcome.gradients.resize(num_parameters(config));
      CUDA_CHECK(cudaMemcpy(outcome.gradients.data(), trainer.gradient_memory,
                            outcome.gradients.size() * sizeof(float), cudaMemcpyDeviceToHost));
      outcome.trace = trace_text(trainer.executor);
    }
  }
  outcome.regions = trainer.optimizer.regions;
  outcome.schedule_text = to_text(make_schedule(c.schedule, c.pp, c.m, c.v, groups.mesh.pp_rank));
  outcome.accounting = trainer.executor.accounting;
  destroy_trainer(trainer);
  return outcome;
}

// The single-stage, single-replica run of global_microbatches, computed on this rank alone
// (a mesh of one), cached: many cases share a global batch.
const Outcome& reference(int global_microbatches, int steps, const GPTConfig& config = kConfig) {
  static std::map<std::tuple<int, int, int>, Outcome> cache;
  const auto key = std::make_tuple(global_microbatches, steps, config.num_layers);
  if (!cache.count(key)) {
    CommGroups alone = create_world_groups(make_mesh(1, 1, 1, 0));
    cache[key] = run({1, 1, ScheduleKind::one_f_one_b, 1, false, global_microbatches}, alone, steps, config);
  }
  return cache.at(key);
}

// The groups of a layout for the length of a test (creation and destruction are collective).
struct WorldGroups {
  explicit WorldGroups(int dp, int pp) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    groups = create_world_groups(make_mesh(dp, pp, kWorld, rank));
  }
  ~WorldGroups() { destroy_world_groups(groups); }
  CommGroups groups;
};

// Every schedule, recompute setting and m in {1, 3, 8} that fits the layout. On a single stage
// (the CPU build's time: its steps are the file's slowest) afab is left out, as it runs the same
// forwards and backwards as 1f1b in another order (its many slots are tested on the
// pipelines), and the interleaved schedule's local hand-overs run with m = 3 only.
std::vector<Case> cases_of(int dp, int pp) {
  std::vector<Case> cases;
  for (int m : {1, 3, 8})
    for (bool recompute : {false, true}) {
      if (pp > 1) cases.push_back({dp, pp, ScheduleKind::afab, 1, recompute, m});
      cases.push_back({dp, pp, ScheduleKind::one_f_one_b, 1, recompute, m});
      // Interleaved: v = 2 chunks, so 2 pp chunks of the 4 layers, and m a multiple of pp.
      const bool fits = 2 * pp <= kConfig.num_layers && m % pp == 0 && m >= pp;
      if (fits && (pp > 1 || m == 3)) cases.push_back({dp, pp, ScheduleKind::interleaved, 2, recompute, m});
    }
  return cases;
}

// One step of every case of the layout against the reference: loss and every gradient region
// the rank owns bitwise equal (dp = 1), or within relative_tolerance of the region's largest
// reference magnitude (dp > 1, where the replicas' sums are added in another order).
void expect_one_step_matches(const std::vector<Case>& cases, double relative_tolerance,
                             const GPTConfig& config = kConfig) {
  WorldGroups world(cases.front().dp, cases.front().pp);
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Outcome outcome = run(c, world.groups, 1, config);
    const Outcome& expected = reference(c.m * c.dp, 1, config);
    EXPECT_EQ(outcome.trace, outcome.schedule_text);
    if (relative_tolerance == 0) {
      EXPECT_EQ(outcome.losses, expected.losses);
    } else {
      EXPECT_NEAR(outcome.losses[0], expected.losses[0], relative_tolerance * std::fabs(expected.losses[0]));
    }
    for (const ParameterRegion& r : outcome.regions) {
      const float* got = outcome.gradients.data() + r.offset;
      const float* want = expected.gradients.data() + r.offset;
      float largest = 0, worst = 0;
      for (size_t i = 0; i < r.count; ++i) {
        largest = std::max(largest, std::fabs(want[i]));
        worst = std::max(worst, std::fabs(got[i] - want[i]));
      }
      if (relative_tolerance == 0) {
        EXPECT_TRUE(std::equal(got, got + r.count, want))
            << parameter_tensor_name(r.tensor) << " at " << r.offset << " differs by up to " << worst;
      } else {
        EXPECT_LE(worst, relative_tolerance * largest) << parameter_tensor_name(r.tensor) << " at " << r.offset;
      }
    }
  }
}

// Five clipped steps of the case: the loss curve of the reference.
void expect_curve_matches(const Case& c, double relative_tolerance) {
  WorldGroups world(c.dp, c.pp);
  {
    SCOPED_TRACE(describe(c));
    const std::vector<double> losses = run(c, world.groups, 5).losses;
    const std::vector<double>& expected = reference(c.m * c.dp, 5).losses;
    if (relative_tolerance == 0) {
      EXPECT_EQ(losses, expected);
    } else {
      for (size_t i = 0; i < expected.size(); ++i)
        EXPECT_NEAR(losses[i], expected[i], relative_tolerance * std::fabs(expected[i])) << "step " << i + 1;
    }
  }
}

int rank_in_world() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace

// Bitwise: the same additions in the same order on any cut of the model (gpt.cuh's layer
// ranges, the tied embedding's two shares added once, the norm from slot partials).
TEST(Pipeline, FourStagesGiveTheSingleStageStepBitwise) { expect_one_step_matches(cases_of(1, 4), 0.0); }

// The interleaved schedule on 4 stages (2 chunks of 8 layers' model): activations go round the
// ring, stage 3 -> stage 0, between the chunks, and its steady state posts four-way groups.
TEST(Pipeline, InterleavedOnFourStagesGivesTheSingleStageStepBitwise) {
  const GPTConfig eight_layers = make_gpt_config(8, 2, 16, kT, 64);
  expect_one_step_matches({{1, 4, ScheduleKind::interleaved, 2, true, 4}}, 0.0, eight_layers);
}

// fp32 gradients summed over 2 or 4 replicas in another association than the single run's
// microbatch loop: a few roundings of 6e-8 each, bounded by 1e-6 of the tensor's largest entry.
TEST(Pipeline, TwoReplicasOfTwoStagesMatchTheSingleStageStep) { expect_one_step_matches(cases_of(2, 2), 1e-6); }
TEST(Pipeline, FourReplicasMatchTheSingleStageStep) { expect_one_step_matches(cases_of(4, 1), 1e-6); }

TEST(Pipeline, FourStageLossCurveWithClippingIsBitwiseTheSingleStageCurve) {
  expect_curve_matches({1, 4, ScheduleKind::one_f_one_b, 1, true, 3}, 0.0);
}
// The replicas' rounding differences pass through five AdamW steps: 1e-6 relative on the loss.
TEST(Pipeline, TwoReplicaLossCurvesWithClippingMatchTheSingleStageCurve) {
  expect_curve_matches({2, 2, ScheduleKind::interleaved, 2, true, 2}, 1e-6);
}

// 1F1B on 4 stages with m = 16: stage s holds min(4 - s, 16) slots; AFAB holds all 16.
TEST(Pipeline, OneFOneBStageHoldsPMinusSSlotsAndAfabHoldsM) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  const Outcome one_f_one_b = run({1, 4, ScheduleKind::one_f_one_b, 1, false, 16}, world.groups, 1);
  const Outcome afab = run({1, 4, ScheduleKind::afab, 1, false, 16}, world.groups, 1);
  EXPECT_EQ(one_f_one_b.accounting.slots, std::vector<int>{4 - stage});
  EXPECT_EQ(afab.accounting.slots, std::vector<int>{16});
  EXPECT_EQ(afab.accounting.activation_bytes * (4 - stage), 16 * one_f_one_b.accounting.activation_bytes);
}

// With recompute a slot is the stage input alone: B T C floats, or B T token ids on stage 0.
TEST(Pipeline, RecomputeSlotHoldsOnlyTheStageInput) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  const Outcome outcome = run({1, 4, ScheduleKind::one_f_one_b, 1, true, 16}, world.groups, 1);
  const size_t expected = stage == 0 ? size_t(kB) * kT * sizeof(int) : size_t(kB) * kT * kConfig.channels * 4;
  EXPECT_EQ(outcome.accounting.slot_bytes, std::vector<size_t>{expected});
  EXPECT_EQ(outcome.accounting.slots, std::vector<int>{4 - stage});
}

// The pools reach their size in the first step: the second allocates nothing.
TEST(Pipeline, NoDeviceAllocationAfterTheFirstStep) {
  WorldGroups world(1, 4);
  for (bool recompute : {false, true}) {
    Trainer trainer = create_trainer(kConfig, kB, kT, {ScheduleKind::one_f_one_b, 8, 1, recompute, {}}, world.groups);
    upload_parameters(trainer, initial_parameters(kConfig));
    BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
    train_step(trainer, reader, kSettings, kLearningRate, 1);
    size_t free_before = 0, free_after = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    train_step(trainer, reader, kSettings, kLearningRate, 2);
    CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    EXPECT_EQ(free_after, free_before) << (recompute ? "recompute" : "");
    destroy_trainer(trainer);
  }
}

// The executed trace is the schedule --print-schedule prints, for every schedule on 4 stages.
TEST(Pipeline, ExecutedTraceIsThePrintedSchedule) {
  WorldGroups world(1, 4);
  for (ScheduleKind kind : {ScheduleKind::afab, ScheduleKind::one_f_one_b}) {
    const Outcome outcome = run({1, 4, kind, 1, false, 5}, world.groups, 1);
    EXPECT_EQ(outcome.trace, outcome.schedule_text) << schedule_name(kind);
    EXPECT_NE(outcome.trace.find(world.groups.mesh.is_last_stage() ? "rF" : "sF"), std::string::npos);
  }
}

// A checkpoint of a 4-stage run (rank 0 gathers the stages' tensors and moments) resumes on
// the same layout to the losses of the run that did not stop.
TEST(Pipeline, FourStageCheckpointResumesBitwise) {
  TempDir own;  // every rank makes one; all use rank 0's
  char directory[512] = {};
  own.file("").copy(directory, sizeof(directory) - 1);
  MPI_Bcast(directory, sizeof(directory), MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string dir = directory;
  if (rank_in_world() == 0) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += i % 7 ? "pipeline " : "stage\n";
    write_bytes(dir + "text.txt", {text.begin(), text.end()});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  TrainOptions options;
  options.train_data = dir + "text.txt";
  options.layers = 4;
  options.heads = 2;
  options.dim = 16;
  options.seq_len = kT;
  options.batch = kB;
  options.microbatches = 2;
  options.warmup = 1;
  options.val_every = 0;
  options.sample_every = 0;
  options.steps = 4;
  const RunResult straight = run_training(options, nullptr);
  TrainOptions first_half = options, second_half = options;
  first_half.steps = 2;
  first_half.save = dir + "model.bin";
  second_half.resume = dir + "model.bin";
  run_training(first_half, nullptr);
  const RunResult resumed = run_training(second_half, nullptr);

  ASSERT_EQ(straight.steps.size(), 4u);
  ASSERT_EQ(resumed.steps.size(), 2u);
  EXPECT_EQ(resumed.steps[0].loss, straight.steps[2].loss);
  EXPECT_EQ(resumed.steps[1].loss, straight.steps[3].loss);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's directory goes when every rank is done with it
}
