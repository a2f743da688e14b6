// The pipeline engine on 4 stages, under mpirun -np 4 only (tools/run_tests.sh; the layouts of
// 2, 4 and 8 ranks are layouts_test.cu's): the interleaved schedule round a ring of 4 stages
// gives the single-stage step bitwise; the executor allocates the schedule's slots (and, for
// split backwards, weight buffers) and no more, the simulator's peaks; with recompute each slot is
// the stage input, nothing is allocated after set-up and a pool never grows; a stage's device bytes are
// exactly its arrays, slots and buffers (fp32 and bf16), and bf16 halves the messages; the
// executor runs what the schedule says (microbatch, chunk, slot, peer, recompute); a schedule
// file of the printed 1F1B grid runs bitwise as 1F1B; each stage allocates only its own tensors;
// a 4-stage checkpoint resumes bitwise.
// The model is pipeline_harness.h's tiny one: the file runs in a few seconds in the CPU build.
#include <gtest/gtest.h>
#include <mpi.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/collectives.h"
#include "kernels/device_memory.cuh"
#include "kernels/gemm.cuh"
#include "kernels/global_norm.cuh"
#include "model/norm_slots.h"
#include "pipeline/buffer_pool.h"
#include "pipeline/schedule_file.h"
#include "pipeline/simulate.h"
#include "tests/file_tools.h"
#include "tests/mpi/pipeline_harness.h"
#include "trainer/command_line/options.h"
#include "trainer/program/run.h"

namespace {

using namespace pipeline_harness;

const GPTConfig kConfig = config_of(4);

}  // namespace

// The interleaved schedule on 4 stages (2 chunks of 8 layers' model): activations go round the
// ring, stage 3 -> stage 0, between the chunks, and its steady state posts four-way groups.
TEST(Pipeline, InterleavedOnFourStagesGivesTheSingleStageStepBitwise) {
  expect_cases_match({{1, 4, ScheduleKind::interleaved, 2, true, 4, 8}}, 1, kBitwise);
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

// The trainer allocates everything before step 1: steps 1 and 2 allocate nothing. Counted by the
// project's allocator, so it holds on a GPU, whose driver may serve or round an allocation
// without changing cudaMemGetInfo; an allocation freed again within the step counts too (the CPU
// build's own count, of every cudaMalloc, is tests/cpu/mpi/device_allocations_test.cu's).
TEST(Pipeline, NoDeviceAllocationAfterSetUp) {
  WorldGroups world(1, 4);
  for (bool recompute : {false, true}) {
    Trainer<float> trainer =
        create_trainer<float>(kConfig, kB, kT, {ScheduleKind::one_f_one_b, 8, 1, recompute, {}}, world.groups);
    upload_parameters(trainer, initial_parameters(kConfig));
    BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
    const DeviceMemoryCounts before = device_memory_counts();
    train_step(trainer, reader, kSettings, kLearningRate, 1);
    train_step(trainer, reader, kSettings, kLearningRate, 2);
    const DeviceMemoryCounts after = device_memory_counts();
    EXPECT_EQ(after.allocations, before.allocations) << (recompute ? "recompute" : "");
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << (recompute ? "recompute" : "");
    destroy_trainer(trainer);
  }
}

// A pool planned and allocated does not grow: a take with none free throws, naming the pool,
// instead of allocating inside a step (pipeline/buffer_pool.h).
TEST(Pipeline, APoolThatWouldGrowAfterSetUpThrowsNamingItself) {
  BufferPool pool = make_pool(64, "stage 0's test buffers");
  take(pool, 1);
  take(pool, 2);
  give_back(pool, 1);
  give_back(pool, 2);
  allocate_pool(pool);
  const uint64_t allocations = device_memory_counts().allocations;
  EXPECT_EQ(take(pool, 3), 0);  // in index order, as a pool that grew on demand
  EXPECT_EQ(take(pool, 4), 1);
  try {
    take(pool, 5);
    ADD_FAILURE() << "a third buffer was taken from a pool of two";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0's test buffers would grow past the 2 planned"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(device_memory_counts().allocations, allocations);
  give_back(pool, 3);
  give_back(pool, 4);
  destroy_pool(pool);
}

// A stage's device bytes, to the byte: its parameters and gradients (two arrays of its parameter
// layout in Element), AdamW's two moments and, for bf16, the master weights (fp32 arrays of the
// layout), the head's share of wte's gradient on the last stage, the norm's buffers and table, the step's
// decision on the device (the count of non-finite losses, the norm, the gate) and AdamW's region
// and block tables, the executor's slots, weight buffers and transfer buffers (its accounting), each chunk's
// backward scratch, the targets and the loss sum, and cuBLAS's workspace (kernels/gemm.cuh). The step's stage records (the log's "dev") carry it; the project's allocator counts
// it, the same on a GPU.
template <typename Element>
void expect_stage_device_bytes(ScheduleKind kind, bool recompute) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
  const size_t before = device_memory_counts().bytes_in_use;
  Trainer<Element> trainer = create_trainer<Element>(kConfig, kB, kT, {kind, 8, 1, recompute, {}}, world.groups);
  upload_parameters(trainer, initial_parameters(kConfig));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  const StepResult result = train_step(trainer, reader, kSettings, kLearningRate, 1);
  const ExecutorAccounting& a = trainer.executor.accounting;
  const size_t wte_bytes = size_t(kConfig.padded_vocab_size) * kConfig.channels * sizeof(Element);
  size_t expected = trainer.parameter_layout.size * (2 * sizeof(Element) + (bf16 ? 3 : 2) * sizeof(float)) +
                    (stage == 3 ? wte_bytes : 0) +
                    (global_norm_workspace_size(int(trainer.optimizer.regions.size())) +
                     norm_slot_count(kConfig.num_layers) + 1) * sizeof(float) +
                    trainer.optimizer.norm_tensors * sizeof(NormTensor) + 2 * sizeof(double) + sizeof(AdamWGate) +
                    trainer.optimizer.regions.size() * sizeof(AdamWRegion) +
                    adamw_region_blocks(trainer.parameter_layout.size) * sizeof(int) +
                    a.activation_bytes + a.transfer_bytes + size_t(kB) * kT * sizeof(int) + sizeof(double) +
                    cublas_workspace_bytes();
  for (const LayerRange& range : trainer.chunks) expected += backward_scratch_bytes<Element>(kConfig, kB, kT, range);
  const unsigned long long held = device_memory_counts().bytes_in_use;
  EXPECT_EQ(held - before, expected);
  std::vector<unsigned long long> held_by_stage(4);
  MPI_Allgather(&held, 1, MPI_UNSIGNED_LONG_LONG, held_by_stage.data(), 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  if (stage == 0) {
    ASSERT_EQ(result.stages.size(), 4u);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(result.stages[s].device_bytes, double(held_by_stage[s])) << "stage " << s;
  }
  destroy_trainer(trainer);
  EXPECT_EQ(device_memory_counts().bytes_in_use, before);
}

TEST(Pipeline, StageDeviceBytesAreItsArraysSlotsAndBuffers) {
  for (const auto& [kind, recompute] : {std::pair{ScheduleKind::one_f_one_b, false},
                                        std::pair{ScheduleKind::one_f_one_b, true}, std::pair{ScheduleKind::zb_h1, false}}) {
    SCOPED_TRACE(schedule_name(kind) + (recompute ? " recompute" : " no recompute"));
    expect_stage_device_bytes<float>(kind, recompute);
    SCOPED_TRACE("bf16");
    expect_stage_device_bytes<__nv_bfloat16>(kind, recompute);
  }
}

// The executor's accounting after one 1F1B step of the 4-stage pipeline.
template <typename Element>
ExecutorAccounting accounting_of_a_step(bool recompute) {
  WorldGroups world(1, 4);
  Trainer<Element> trainer =
      create_trainer<Element>(kConfig, kB, kT, {ScheduleKind::one_f_one_b, 8, 1, recompute, {}}, world.groups);
  upload_parameters(trainer, initial_parameters(kConfig));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  train_step(trainer, reader, kSettings, kLearningRate, 1);
  const ExecutorAccounting accounting = trainer.executor.accounting;
  destroy_trainer(trainer);
  return accounting;
}

// In bf16 every message between stages (an activation forward, a gradient backward: B T C
// elements) is half the fp32 one: the transfer buffers they are sent from and received into
// (recompute: the send buffers too) halve, and so does a recompute slot, the stage's input.
TEST(Pipeline, Bf16MessagesAndStageInputsAreHalfTheFp32Ones) {
  const int stage = rank_in_world();
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "no recompute");
    const ExecutorAccounting fp32 = accounting_of_a_step<float>(recompute);
    const ExecutorAccounting bf16 = accounting_of_a_step<__nv_bfloat16>(recompute);
    EXPECT_GT(fp32.transfer_bytes, 0u);
    EXPECT_EQ(2 * bf16.transfer_bytes, fp32.transfer_bytes);
    EXPECT_EQ(bf16.slots, fp32.slots);
    if (recompute && stage > 0) {
      EXPECT_EQ(2 * bf16.slot_bytes[0], fp32.slot_bytes[0]);
    }
    if (!recompute) {
      EXPECT_LT(bf16.activation_bytes, fp32.activation_bytes);
    }
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
    Trainer<float> trainer = create_trainer<float>(config, kB, kT, {kind, 4, v, false, {}}, world.groups);
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

// What the executor ran is what the schedule says (tests/mpi/trace_check.h): each step's
// microbatch and chunk, each message's peer (round the ring, or along the V), slots and weight
// buffers held by one microbatch at a time, each backward on its forward's slot and each W on its
// I's buffer, as many slots and buffers as allocated, and a forward run again exactly before a B
// or I whose microbatch the working set does not hold. For every schedule on 4 stages, with and
// without recompute; with recompute in 1F1B only the last stage, whose backwards follow their
// forwards, recomputes nothing. DualPipeV's overlapped pairs: each pair's backward ran on the
// second compute stream (the stage's last B of a chunk is never in a pair there); that a pair's two
// computes are in flight at once is OverlappedPair.ItsTwoComputesAreInFlightAtOnce's (measured
// here, it depended on the OS running two stream workers together: 8 runs of 10 with both cores
// busy, 2026-11-27).
TEST(Pipeline, ExecutedTraceFollowsTheSchedule) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  for (Case c : std::vector<Case>{{1, 4, ScheduleKind::afab, 1, false, 5, 4},
                                  {1, 4, ScheduleKind::one_f_one_b, 1, false, 5, 4},
                                  {1, 4, ScheduleKind::interleaved, 2, false, 4, 8},
                                  {1, 4, ScheduleKind::zb_h1, 1, false, 5, 4},
                                  {1, 4, ScheduleKind::zb_h2, 1, false, 5, 4},
                                  {1, 4, ScheduleKind::zb_v, 2, false, 5, 8},
                                  {1, 4, ScheduleKind::dual_pipe_v, 2, false, 8, 8}}) {
    for (const bool recompute : {false, true}) {
      c.recompute = recompute;
      SCOPED_TRACE(describe(c));
      const Outcome outcome = run(c, world.groups, 1);
      trace_check::expect_trace_follows_schedule(outcome.trace, outcome.schedule, outcome.placement, stage, recompute,
                                                 outcome.accounting);
      int messages = 0, recomputed = 0;
      for (const ExecutedStep& step : outcome.trace) {
        messages += int(step.messages.size());
        recomputed += step.recomputed;
      }
      EXPECT_GT(messages, 0);
      int pairs = 0, on_second_stream = 0;
      for (size_t i = 0; i < outcome.trace.size(); ++i) {
        pairs += outcome.schedule[i][0].overlapped;
        on_second_stream += outcome.trace[i].stream;
        EXPECT_EQ(outcome.trace[i].stream, outcome.schedule[i][0].overlapped ? 1 : 0) << to_text(outcome.trace[i]);
      }
      EXPECT_EQ(pairs > 0, c.schedule == ScheduleKind::dual_pipe_v);
      EXPECT_EQ(on_second_stream, pairs);
      if (recompute && c.schedule == ScheduleKind::one_f_one_b) {
        EXPECT_EQ(recomputed == 0, stage == 3) << recomputed << " recomputed";
      }
    }
  }
}

// The executor's pools grow to the simulator's peaks and no further, chunk by chunk: the slots to
// the most microbatches whose input has arrived and whose B or I has not run, the weight-gradient-
// input buffers to the most between I and W (what --print-schedule reports as the memory). ZB-H1
// holds 1F1B's slots (4 - s on stage s) and s + 1 weight buffers; ZB-H2 up to 2p - 1 = 7 slots on
// stage 0.
TEST(Pipeline, ExecutorPoolsAreTheSimulatorsPeaks) {
  WorldGroups world(1, 4);
  const int stage = rank_in_world();
  for (ScheduleKind kind : {ScheduleKind::afab, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                            ScheduleKind::zb_h1, ScheduleKind::zb_h2, ScheduleKind::zb_v}) {
    SCOPED_TRACE(schedule_name(kind));
    const int v = kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_v ? 2 : 1;
    const Outcome outcome = run({1, 4, kind, v, false, 8, 4 * v}, world.groups, 1);
    const StageSimulation expected =
        simulate(make_all_schedules(kind, 4, 8, v), {1, 1, 1, 0}, placement_of(kind, 4, v).kind).stages[stage];
    EXPECT_EQ(outcome.accounting.slots, expected.chunk_peak_in_flight);
    EXPECT_EQ(outcome.accounting.weight_buffers, expected.chunk_peak_pending);
    if (kind == ScheduleKind::zb_h1) {
      EXPECT_EQ(outcome.accounting.slots, std::vector<int>{4 - stage});
      EXPECT_EQ(outcome.accounting.weight_buffers, std::vector<int>{stage + 1});
    }
    if (kind == ScheduleKind::zb_h2 && stage == 0) {
      EXPECT_EQ(outcome.accounting.slots, std::vector<int>{7});
    }
  }
}

// A schedule file holding the printed 1F1B grid (pipeline/schedule_file.h) runs bitwise as the
// built-in 1F1B: the same losses, norms and gradients, though its transfers are lowered anew.
TEST(Pipeline, PrintedOneFOneBGridFedBackRunsBitwiseTheSame) {
  WorldGroups world(1, 4);
  const Case c{1, 4, ScheduleKind::one_f_one_b, 1, false, 5, 4};
  const std::string printed = format_grid(make_all_schedules(ScheduleKind::one_f_one_b, 4, 5, 1));
  const Outcome built_in = run(c, world.groups, 3);
  const ScheduleGrid grid = parse_schedule_grid(printed);
  const Outcome from_file = run(c, world.groups, 3, &grid);
  EXPECT_EQ(from_file.losses, built_in.losses);
  EXPECT_EQ(from_file.grad_norms, built_in.grad_norms);
  EXPECT_EQ(from_file.gradients, built_in.gradients);
  EXPECT_EQ(compute_actions(from_file.schedule), compute_actions(built_in.schedule));
  trace_check::expect_trace_follows_schedule(from_file.trace, from_file.schedule, from_file.placement,
                                             rank_in_world(), false, from_file.accounting);
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
