// The pipeline engine on 4 stages, under mpirun -np 4 only (tools/run_tests.sh; the layouts of
// 2, 4 and 8 ranks are layouts_test.cu's): the interleaved schedule round a ring of 4 stages
// gives the single-stage step bitwise; the executor allocates the schedule's slots and no more,
// with recompute each slot is the stage input, and nothing after the first step; the executor
// runs exactly the printed schedule; each stage allocates only its own tensors; a 4-stage
// checkpoint resumes bitwise.
// The model is pipeline_harness.h's tiny one: the file runs in a few seconds in the CPU build.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "tests/file_tools.h"
#include "tests/mpi/pipeline_harness.h"
#include "trainer/options.h"
#include "trainer/run.h"

namespace {

using namespace pipeline_harness;

const GPTConfig kConfig = config_of(4);

}  // namespace

// The interleaved schedule on 4 stages (2 chunks of 8 layers' model): activations go round the
// ring, stage 3 -> stage 0, between the chunks, and its steady state posts four-way groups.
TEST(Pipeline, InterleavedOnFourStagesGivesTheSingleStageStepBitwise) {
  expect_cases_match({{1, 4, ScheduleKind::interleaved, 2, true, 4, 8}}, 1, 0.0);
}

// 1F1B on 4 stages with m = 16: stage s holds min(4 - s, 16) slots; AFAB holds all 16.
TEST(Pipeline, OneFOneBStageHoldsPMinusSSlotsAndAfabHoldsM) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  const Outcome one_f_one_b = run({1, 4, ScheduleKind::one_f_one_b, 1, false, 16, 4}, world.groups, 1);
  const Outcome afab = run({1, 4, ScheduleKind::afab, 1, false, 16, 4}, world.groups, 1);
  EXPECT_EQ(one_f_one_b.accounting.slots, std::vector<int>{4 - stage});
  EXPECT_EQ(afab.accounting.slots, std::vector<int>{16});
  EXPECT_EQ(afab.accounting.activation_bytes * (4 - stage), 16 * one_f_one_b.accounting.activation_bytes);
}

// With recompute a slot is the stage input alone: B T C floats, or B T token ids on stage 0.
TEST(Pipeline, RecomputeSlotHoldsOnlyTheStageInput) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  const Outcome outcome = run({1, 4, ScheduleKind::one_f_one_b, 1, true, 16, 4}, world.groups, 1);
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

// Each stage allocates only its own tensors: its parameter allocation is exactly its regions;
// stage 0 holds wte and wpe, stage 3 a tied copy of wte and lnf, the middle stages neither; the
// stages' layers together are the model's, each once. For one chunk per stage and for two.
TEST(Pipeline, EachStageAllocatesOnlyItsOwnTensors) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  for (const int v : {1, 2}) {
    SCOPED_TRACE("v " + std::to_string(v));
    const GPTConfig config = config_of(4 * v);
    const ScheduleKind kind = v == 1 ? ScheduleKind::one_f_one_b : ScheduleKind::interleaved;
    Trainer trainer = create_trainer(config, kB, kT, {kind, 4, v, false, {}}, world.groups);
    const ParameterLayout& layout = trainer.parameter_layout;
    size_t held = 0, layer_elements = 0;
    std::vector<int> wte, others;  // tied_copy of each wte region; the other tensors outside the layers
    for (const ParameterRegion& r : layout.regions) {
      held += r.count;
      if (parameter_tensor_is_per_layer(r.tensor)) layer_elements += r.count;
      else if (r.tensor == kWte) wte.push_back(r.tied_copy);
      else others.push_back(r.tensor);
    }
    EXPECT_EQ(held, layout.size);
    EXPECT_EQ(layer_elements, size_t(v) * parameters_per_layer(config));
    const size_t C = config.channels, wte_size = size_t(config.padded_vocab_size) * C;
    const size_t wpe_size = size_t(config.max_seq_len) * C;
    if (stage == 0) {
      EXPECT_EQ(wte, std::vector<int>{false});
      EXPECT_EQ(others, std::vector<int>{kWpe});
      EXPECT_EQ(layout.size, wte_size + wpe_size + layer_elements);
    } else if (stage == 3) {
      EXPECT_EQ(wte, std::vector<int>{true});
      EXPECT_EQ(others, (std::vector<int>{kLnfw, kLnfb}));
      EXPECT_EQ(layout.size, wte_size + layer_elements + 2 * C);
    } else {
      EXPECT_TRUE(wte.empty());
      EXPECT_TRUE(others.empty());
      EXPECT_EQ(layout.size, layer_elements);
    }
    EXPECT_EQ(trainer.grad_wte_head != nullptr, stage == 3);  // the head's share of wte's gradient
    unsigned long long total_layer_elements = layer_elements;
    MPI_Allreduce(MPI_IN_PLACE, &total_layer_elements, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total_layer_elements, size_t(config.num_layers) * parameters_per_layer(config));
    destroy_trainer(trainer);
  }
}

// The executed trace is the schedule --print-schedule prints, for every schedule on 4 stages.
TEST(Pipeline, ExecutedTraceIsThePrintedSchedule) {
  WorldGroups world(1, 4);
  for (ScheduleKind kind : {ScheduleKind::afab, ScheduleKind::one_f_one_b}) {
    const Outcome outcome = run({1, 4, kind, 1, false, 5, 4}, world.groups, 1);
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
