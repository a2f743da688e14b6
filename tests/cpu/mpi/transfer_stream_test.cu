// The executor's transfer stream (pipeline/execute.h): a compute that does not depend on a
// transfer group runs while that group is still in flight, and TRAIN_TRANSFERS_IN_COMPUTE_STREAM=1
// puts the groups back in the compute stream, with the same losses. CPU build only
// (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4): the overlap is made visible by the CPU
// build's emulated network latency (CUDA_CPU_NCCL_LATENCY_US, cpu/runtime/settings.h), not by a clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/runtime/settings.h"
#include "tests/mpi/pipeline_harness.h"
#include "trainer/program/measured_timeline.h"

namespace {

using namespace pipeline_harness;

// Every NCCL group completes this long after its data has arrived, at first: far longer than the
// compute stream takes from one forward of the tiny model to the next (about a millisecond).
constexpr int kLatencyUs = 100000;

struct Measured {
  std::vector<double> losses;
  StageSchedule schedule;
  ExecutorAccounting accounting;  // of step 2, with a timeline origin
};

// Two steps of case c with the latency (us), step 2 timed from an origin common to the ranks; the
// transfers in the compute stream when serial.
Measured run_with_latency(const Case& c, bool serial, int latency_us) {
  if (serial) setenv("TRAIN_TRANSFERS_IN_COMPUTE_STREAM", "1", 1);
  WorldGroups world(c.dp, c.pp);
  const GPTConfig config = config_of(c.layers);
  Trainer<float> trainer =
      create_trainer<float>(config, kB, kT, PipelineLayout{c.schedule, c.m, c.v, false, {}}, world.groups,
                            {true, kRoundingSeed});
  unsetenv("TRAIN_TRANSFERS_IN_COMPUTE_STREAM");
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  cpu::settings().nccl_latency_us = latency_us;
  Measured measured;
  for (int t = 1; t <= 2; ++t) {
    if (t == 2) start_measured_timeline(trainer);
    measured.losses.push_back(train_step(trainer, reader, kSettings, kLearningRate, t).loss);
  }
  cpu::settings().nccl_latency_us = 0;
  measured.schedule = trainer.executor.schedule;
  measured.accounting = trainer.executor.accounting;
  destroy_trainer(trainer);
  return measured;
}

// Case c run both ways; the losses must be the same bits.
struct BothWays {
  Measured overlapped, serial;
};
BothWays run_both_ways(const Case& c, int latency_us) {
  BothWays runs{run_with_latency(c, false, latency_us), run_with_latency(c, true, latency_us)};
  EXPECT_EQ(runs.overlapped.losses, runs.serial.losses);
  return runs;
}

size_t index_of(const StageSchedule& schedule, const std::string& text) {
  for (size_t i = 0; i < schedule.size(); ++i)
    if (to_text(schedule[i]) == text) return i;
  ADD_FAILURE() << text << " is not in " << to_text(schedule);
  return 0;
}

// Rank 0's checks of a run both ways with the latency (us). Returns the latency of a second run
// when `may_run_again` and with its own stream F1 started only after sF0's group ended; else 0.
int check_overlap(const BothWays& runs, int latency_us, bool may_run_again) {
  const Measured& overlapped = runs.overlapped;
  const size_t previous = index_of(overlapped.schedule, "F0");
  const size_t send = index_of(overlapped.schedule, "sF0"), forward = index_of(overlapped.schedule, "F1");
  const ExecutorAccounting& a = overlapped.accounting;
  const ExecutorAccounting& b = runs.serial.accounting;
  EXPECT_LT(send, forward);
  EXPECT_EQ(a.step_end_ms.size(), overlapped.schedule.size());
  EXPECT_EQ(b.step_end_ms.size(), runs.serial.schedule.size());
  if (testing::Test::HasFailure()) return 0;
  EXPECT_GE(b.step_start_ms[forward], b.step_end_ms[send])
      << "in the compute stream: F1 started at " << b.step_start_ms[forward] << " ms, sF0's group ended at "
      << b.step_end_ms[send] << " ms";
  // sF0's group waits out the latency after F0 (its data) has ended.
  EXPECT_GE(a.step_end_ms[send] - a.step_start_ms[send], latency_us * 1e-3);
  const double gap_ms = a.step_start_ms[forward] - a.step_end_ms[previous];
  if (may_run_again && a.step_start_ms[forward] >= a.step_end_ms[send])
    return std::max(4 * kLatencyUs, int(4 * gap_ms * 1e3));
  EXPECT_LT(a.step_start_ms[forward], a.step_end_ms[send])
      << "with its own stream: F1 started at " << a.step_start_ms[forward] << " ms (" << gap_ms
      << " ms after F0 ended), sF0's group ended at " << a.step_end_ms[send] << " ms";
  return 0;
}

}  // namespace

// Stage 0 of 1F1B begins "F0 sF0 F1 sF1": F1 reads nothing sF0 touches, so with transfers on their
// own stream F1 starts while sF0's group still waits out its latency; in the compute stream F1
// cannot start before that group ends. The losses are the same bits either way.
// The latency is the margin: with its own stream F1 starts right after F0, unless the compute
// stream's thread was stopped between them for the latency (a loaded machine). A run that shows
// F1 starting after sF0's group ended is run again, once, with a latency four times the gap from
// F0's end to F1's start measured in it: a stall would have to outlast its own measure four times
// over, while transfers serialised with the computes fail both runs.
TEST(TransferStream, AComputeStartsWhileTheSendBeforeItIsInFlight) {
  const Case one_layer_a_stage{1, 4, ScheduleKind::one_f_one_b, 1, false, 4, 4};
  int latency_us = kLatencyUs;
  for (int run = 1; latency_us > 0; ++run) {
    const BothWays runs = run_both_ways(one_layer_a_stage, latency_us);
    latency_us = rank_in_world() == 0 ? check_overlap(runs, latency_us, run == 1) : 0;
    MPI_Bcast(&latency_us, 1, MPI_INT, 0, MPI_COMM_WORLD);  // every rank takes part in a second run
  }
}
