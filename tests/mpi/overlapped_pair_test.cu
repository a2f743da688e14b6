// A transfer group after one of DualPipeV's overlapped pairs waits for both of the pair's computes,
// each on its own compute stream (pipeline/execute_steps.cu's transfer_step), at -np 4. Stage 1's
// first pair, F6&B2.1, is followed by a group that sends both F6's output and B2.1's input gradient.
// One of the two computes is held by a host function queued just before its kernels (the
// executor's before_compute), after the pair's start, so the other runs: a group that waited only
// for the other would begin, and send the held compute's buffer unwritten, while it is held. The
// test opens the hold once the group has ended (it began, then, without the held compute), or else
// a second after the group could have begun: the other compute and the group before it on the
// transfer stream both ended, so a group not waiting for the held compute needs only its transfer
// stream's worker to record its start event, microseconds. A correct executor passes whenever the
// hold opens; the second is how long a missing wait is given to show (nothing on a stream tells a
// group waiting for an event from one its worker has not reached yet, so no event can end it).
// And the pair's two computes are in flight at once (OverlappedPair.ItsTwoComputesAreInFlightAtOnce).
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "kernels/cuda_check.cuh"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

// Not stage 0: its chunk-0 forwards copy the step's tokens from pageable host memory, a copy that
// may wait for the held stream, and the host with it, before the group is queued.
constexpr int kHeldStage = 1;

// A host function that holds its stream until *open (an std::atomic<bool>) is true.
void hold_until_open(void* open) {
  while (!static_cast<std::atomic<bool>*>(open)->load()) std::this_thread::yield();
}

// The schedule steps of the held stage's first pair: its forward, its backward, the group after
// them (which sends both outputs) and the last group before the pair.
struct PairAndGroup {
  int forward = -1, backward = -1, group = -1, previous_group = -1;
};

PairAndGroup first_pair_and_its_group(const StageSchedule& schedule) {
  PairAndGroup found;
  for (size_t i = 0; i + 2 < schedule.size(); ++i) {
    if (!is_compute(schedule[i])) found.previous_group = int(i);
    if (is_compute(schedule[i]) && is_compute(schedule[i + 1]) && schedule[i + 1][0].overlapped) {
      found.forward = int(i);
      found.backward = int(i) + 1;
      found.group = int(i) + 2;
      return found;
    }
  }
  return found;
}

bool sends(const Step& group, ActionKind kind, const Action& compute) {
  for (const Action& a : group)
    if (a.kind == kind && a.microbatch == compute.microbatch && a.chunk == compute.chunk) return true;
  return false;
}

// Whether an event has completed, asked under the executor's progress mutex, as schedule_position
// asks (the executor records its step events holding it).
bool ended(const Executor<float>& e, cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(e.progress->mutex);
  return cudaEventQuery(event) == cudaSuccess;
}

struct HeldStep {
  double loss = 0, grad_norm = 0;
  bool group_began_while_held = false;  // the held stage's only
  std::string pair, group;              // the held stage's steps, as text
};

// One DualPipeV step of case c; on the held stage, the pair's forward (hold_forward) or its backward
// held until the test opens it.
HeldStep step_holding(const Case& c, bool hold_forward, const CommGroups& groups) {
  const PipelineLayout layout{c.schedule, c.m, c.v, c.recompute, c.layers_per_stage};
  Trainer<float> trainer =
      create_trainer<float>(config_of(c.layers), kB, kT, layout, groups, MixedPrecision{true, kRoundingSeed});
  upload_parameters(trainer, initial_parameters(config_of(c.layers)));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  Executor<float>& e = trainer.executor;
  HeldStep result;
  std::atomic<bool> open{true};
  std::thread opener;
  if (groups.mesh.pp_rank == kHeldStage) {
    const PairAndGroup at = first_pair_and_its_group(e.schedule);
    EXPECT_GE(at.forward, 0) << "stage " << kHeldStage << " has no overlapped pair";
    if (at.forward >= 0) {
      result.pair = to_text(e.schedule[at.forward]) + to_text(e.schedule[at.backward]);  // "F6&B2.1"
      result.group = to_text(e.schedule[at.group]);
      EXPECT_FALSE(is_compute(e.schedule[at.group])) << result.pair << " is followed by " << result.group;
      EXPECT_TRUE(sends(e.schedule[at.group], ActionKind::send_forward, e.schedule[at.forward][0]) &&
                  sends(e.schedule[at.group], ActionKind::send_backward, e.schedule[at.backward][0]))
          << result.group << " does not send both outputs of " << result.pair;
      const int held = hold_forward ? at.forward : at.backward, other = hold_forward ? at.backward : at.forward;
      open = false;
      e.before_compute = [&open, held](int step, cudaStream_t stream) {
        if (step == held) CUDA_CHECK(cudaLaunchHostFunc(stream, hold_until_open, &open));
      };
      int device = 0;
      CUDA_CHECK(cudaGetDevice(&device));
      opener = std::thread([&e, &open, &result, at, other, device] {
        CUDA_CHECK(cudaSetDevice(device));
        const auto queued_past_the_group = [&e, &at] {
          std::lock_guard<std::mutex> lock(e.progress->mutex);
          return e.progress->walking && e.progress->queued > at.group;
        };
        while (!queued_past_the_group()) std::this_thread::yield();
        while (!ended(e, e.step_end[other]) || (at.previous_group >= 0 && !ended(e, e.step_end[at.previous_group])))
          std::this_thread::yield();
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!ended(e, e.step_end[at.group]) && std::chrono::steady_clock::now() < deadline)
          std::this_thread::yield();
        result.group_began_while_held = ended(e, e.step_start[at.group]);
        open = true;
      });
    }
  }
  const StepResult step = train_step(trainer, reader, kSettings, kLearningRate, 1);
  result.loss = step.loss;
  result.grad_norm = step.grad_norm;
  if (opener.joinable()) opener.join();
  destroy_trainer(trainer);
  return result;
}

// Held either way, the group began only once both computes had ended, and the step is still the
// single-stage step, bitwise: its loss (the forward's sends) and its gradient norm (the backward's).
TEST(OverlappedPair, GroupAfterThePairWaitsForBothComputeStreams) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Case c{1, 4, ScheduleKind::dual_pipe_v, 2, false, 8, 8};
  WorldGroups world(1, 4);
  share_references({c}, 1, world.groups);
  const double expected = reference(c, 1).losses[0], expected_norm = reference(c, 1).grad_norms[0];
  for (const bool hold_forward : {true, false}) {
    const HeldStep step = step_holding(c, hold_forward, world.groups);
    const char* held = hold_forward ? "forward (the caller's stream)" : "backward (the second compute stream)";
    if (world.groups.mesh.pp_rank == kHeldStage) {
      EXPECT_FALSE(step.group_began_while_held)
          << "stage " << kHeldStage << "'s group " << step.group << " began while the " << held << " of "
          << step.pair << " was held: it does not wait for that stream, and sent its buffer unwritten";
    }
    EXPECT_EQ(std::bit_cast<uint64_t>(step.loss), std::bit_cast<uint64_t>(expected))
        << "with the " << held << " of stage " << kHeldStage << "'s first pair held: step 1's loss " << step.loss
        << ", the single-stage run's " << expected;
    EXPECT_EQ(std::bit_cast<uint64_t>(step.grad_norm), std::bit_cast<uint64_t>(expected_norm))
        << "with the " << held << " of stage " << kHeldStage << "'s first pair held: step 1's gradient norm "
        << step.grad_norm << ", the single-stage run's " << expected_norm;
  }
}

// A pair's two computes meet before their kernels: a host function on each compute's stream, queued
// by before_compute after the compute's start event, waits until the other's has come too (or, with
// an executor that ran them one after the other, gives up after kMeetingSeconds). Met, each started
// before the other ended, on any machine and load.
constexpr int kMeetingSeconds = 10;

struct Meeting {
  std::atomic<int> arrived{0};
  std::atomic<bool> gave_up{false};
};

void meet(void* meeting) {
  Meeting& m = *static_cast<Meeting*>(meeting);
  m.arrived += 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kMeetingSeconds);
  while (m.arrived.load() < 2) {
    if (std::chrono::steady_clock::now() > deadline) {
      m.gave_up = true;
      return;
    }
    std::this_thread::yield();
  }
}

}  // namespace

// The first pair of stage kHeldStage has its forward and its backward in flight at once: each
// reached its kernels while the other had not ended (the meeting), and the executor measured the
// pair as overlapped (its accounting, from the two computes' start and end events). One stage meets,
// the others run as always: the pair's inputs come from computes outside it, so the meeting waits
// only for them. A timing-free form of what Pipeline.ExecutedTraceFollowsTheSchedule once checked
// by chance (two stream workers scheduled together by the OS).
TEST(OverlappedPair, ItsTwoComputesAreInFlightAtOnce) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Case c{1, 4, ScheduleKind::dual_pipe_v, 2, false, 8, 8};
  WorldGroups world(1, 4);
  const PipelineLayout layout{c.schedule, c.m, c.v, c.recompute, c.layers_per_stage};
  Trainer<float> trainer = create_trainer<float>(config_of(c.layers), kB, kT, layout, world.groups,
                                                 MixedPrecision{true, kRoundingSeed});
  upload_parameters(trainer, initial_parameters(config_of(c.layers)));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  Executor<float>& e = trainer.executor;
  Meeting meeting;
  const PairAndGroup at = first_pair_and_its_group(e.schedule);
  const bool meets = world.groups.mesh.pp_rank == kHeldStage;
  if (meets) {
    ASSERT_GE(at.forward, 0) << "stage " << kHeldStage << " has no overlapped pair";
    e.before_compute = [&meeting, at](int step, cudaStream_t stream) {
      if (step == at.forward || step == at.backward) CUDA_CHECK(cudaLaunchHostFunc(stream, meet, &meeting));
    };
  }
  train_step(trainer, reader, kSettings, kLearningRate, 1);
  if (meets) {
    const std::string pair = to_text(e.schedule[at.forward]) + to_text(e.schedule[at.backward]);
    EXPECT_FALSE(meeting.gave_up) << "stage " << kHeldStage << "'s " << pair << ": one compute waited "
                                  << kMeetingSeconds << " s for the other to start: they do not run at once";
    EXPECT_GE(e.accounting.pairs_overlapped, 1) << "stage " << kHeldStage << "'s " << pair
                                                << " met, but the executor did not measure it overlapped";
  }
  destroy_trainer(trainer);
}
