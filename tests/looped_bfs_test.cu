// The looped breadth-first schedule (pipeline/looped_bfs.h): PyTorch's ScheduleLoopedBFS order
// with each chunk's backwards in microbatch order, every stage holding every microbatch of every
// chunk at the turn, no deadlock in either simulator, and its place in the schedule list.
// Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/looped_bfs.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace {

// A transcription of PyTorch's torch/distributed/pipelining/schedules.py,
// ScheduleLoopedBFS._calculate_single_rank_operations, without its no-op padding: for each of the
// rank's stage indices (rank, rank + p, ...) a forward of every microbatch, then for the stage
// indices reversed a FULL_BACKWARD of every microbatch from the last down. Stage index c p + rank
// is our chunk c (the ring placement).
std::vector<Action> pytorch_order(int p, int rank, int m, int v) {
  std::vector<Action> rank_ops;
  for (int stage_index = rank; stage_index < p * v; stage_index += p)
    for (int mb_index = 0; mb_index < m; mb_index++)
      rank_ops.push_back({ActionKind::forward, mb_index, stage_index / p});
  for (int stage_index = rank + p * (v - 1); stage_index >= 0; stage_index -= p)
    for (int mb_index = m - 1; mb_index >= 0; mb_index--)
      rank_ops.push_back({ActionKind::backward, mb_index, stage_index / p});
  return rank_ops;
}

}  // namespace

// Ours is PyTorch's with each chunk's m backwards in microbatch order (bitwise with one process).
TEST(LoopedBfs, IsPyTorchsOrderWithEachChunksBackwardsInMicrobatchOrder) {
  EXPECT_EQ(format_grid(make_all_schedules(ScheduleKind::looped_bfs, 2, 3, 2)),
            "stage 0 | F0   F1   F2   F0.1 F1.1 F2.1 B0.1 B1.1 B2.1 B0   B1   B2\n"
            "stage 1 | F0   F1   F2   F0.1 F1.1 F2.1 B0.1 B1.1 B2.1 B0   B1   B2\n");
  for (int p = 1; p <= 4; p++)
    for (int v = 1; v <= 3; v++)
      for (int m = 1; m <= 6; m++)
        for (int stage = 0; stage < p; stage++) {
          std::vector<Action> expected = pytorch_order(p, stage, m, v);
          for (size_t first = size_t(m) * v; first < expected.size(); first += m)
            std::reverse(expected.begin() + first, expected.begin() + first + m);
          EXPECT_EQ(looped_bfs_order(p, m, v, stage), expected) << "p " << p << " v " << v << " m " << m;
        }
}

// Every stage holds all m microbatches of every chunk at the turn, as afab does.
TEST(LoopedBfs, EveryStageHoldsEveryMicrobatchOfEveryChunk) {
  for (int p : {2, 4})
    for (int v : {2, 3}) {
      const Simulation simulation = simulate(make_all_schedules(ScheduleKind::looped_bfs, p, 5, v), {1, 1, 1, 0});
      for (const StageSimulation& stage : simulation.stages)
        EXPECT_EQ(stage.chunk_peak_in_flight, std::vector<int>(v, 5)) << "p " << p << " v " << v;
    }
}

// Lowered in time order (each chunk's outputs go round the ring m forwards before stage 0 takes
// them): no deadlock one step at a time nor on the transfer stream.
TEST(LoopedBfs, RunsWithoutDeadlock) {
  for (int p = 1; p <= 6; p++)
    for (int v = 1; v <= 3; v++)
      for (int m = 1; m <= 2 * p + 1; m++) {
        const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::looped_bfs, p, m, v);
        for (const StepCosts& costs : {StepCosts{1, 1, 1, 0}, StepCosts{2, 1, 3, 0.5}}) {
          EXPECT_EQ(simulate(stages, costs).deadlock, "") << "p " << p << " v " << v << " m " << m;
          EXPECT_EQ(simulate_transfer_stream(stages, costs).deadlock, "") << "p " << p << " v " << v << " m " << m;
        }
      }
}

TEST(LoopedBfs, IsAScheduleOfTheRingWithAnyChunks) {
  EXPECT_EQ(parse_schedule_kind("looped-bfs"), ScheduleKind::looped_bfs);
  EXPECT_EQ(schedule_name(ScheduleKind::looped_bfs), "looped-bfs");
  EXPECT_EQ(placement_of(ScheduleKind::looped_bfs, 4, 3).kind, PlacementKind::ring);
  EXPECT_FALSE(splits_backward(ScheduleKind::looped_bfs));
  EXPECT_EQ(chunks_per_stage(ScheduleKind::looped_bfs, 3), 3);
  for (int stage = 0; stage < 3; stage++)  // one chunk: afab
    EXPECT_EQ(looped_bfs_order(3, 4, 1, stage), afab_order(3, 4, stage));
}
