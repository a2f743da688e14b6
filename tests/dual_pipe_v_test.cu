// DualPipeV (pipeline/dual_pipe_v.h): its order is DeepSeek's and PyTorch's, action for action,
// its m >= 2p error, its place in the schedule list, and its lowering runs without deadlock.
// Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "pipeline/dual_pipe_v.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace {

std::string order_text(int p, int m, int stage) {
  std::string text;
  for (const Action& a : dual_pipe_v_order(p, m, stage)) text += (text.empty() ? "" : " ") + to_text(a);
  return text;
}

}  // namespace

// Written out by hand from PyTorch's ScheduleDualPipeV._calculate_single_rank_operations
// (torch/distributed/pipelining/schedules.py), phase by phase, each OVERLAP_F_B as its forward then
// its FULL_BACKWARD; deepseek-ai/DualPipe's dualpipev.py (steps 1 to 8 of
// DualPipeV.step) runs the same computes in the same order. Our ".1" is their stage 2p - 1 - rank.
TEST(DualPipeV, IsTheirOrderActionForAction) {
  // p = 2, m = 4. Rank 0: 2 F0; (F0, F1); (I1, W1, F1); pairs (F0, B1), (F1, B0); B1, pair (F1, B0);
  // B1 then, from here on split, I0; W, I0; W.
  EXPECT_EQ(order_text(2, 4, 0), "F0 F1 F2 F0.1 I0.1 W0.1 F1.1 F3 B1.1 F2.1 B0 B2.1 F3.1 B1 B3.1 I2 W2 I3 W3");
  // Rank 1, the last: 2 (F0, F1); the first (F0, B1) one after the other, then pairs; on an odd
  // rank the split starts at B1 of the second (B1, B0).
  EXPECT_EQ(order_text(2, 4, 1), "F0 F0.1 F1 F1.1 F2 B0.1 F2.1 B0 F3 B1.1 F3.1 B1 B2.1 B2 I3.1 I3 W3.1 W3");
  // p = 4, m = 8, rank 1: 4 F0; 2 (F0, F1); 2 (I1, W1, F1); 2 times the two pairs; 2 times B1 and
  // the pair (F1, B0); (B1, B0), (I1, I0); (W, I0) twice; 2 W's.
  EXPECT_EQ(order_text(4, 8, 1),
            "F0 F1 F2 F3 F4 F0.1 F5 F1.1 I0.1 W0.1 F2.1 I1.1 W1.1 F3.1 F6 B2.1 F4.1 B0 F7 B3.1 F5.1 B1 "
            "B4.1 F6.1 B2 B5.1 F7.1 B3 B6.1 B4 I7.1 I5 W7.1 I6 W5 I7 W6 W7");
}

TEST(DualPipeV, NeedsTwoMicrobatchesPerStage) {
  try {
    dual_pipe_v_order(4, 7, 0);
    FAIL() << "m = 7 < 2p = 8 was taken";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "--schedule dualpipev needs --microbatches at least 2 --pp = 8; got 7");
  }
  EXPECT_THROW(make_all_schedules(ScheduleKind::dual_pipe_v, 2, 3, 2), std::runtime_error);
  EXPECT_NO_THROW(make_all_schedules(ScheduleKind::dual_pipe_v, 2, 4, 2));
}

TEST(DualPipeV, IsAVScheduleCalledDualpipev) {
  EXPECT_EQ(parse_schedule_kind("dualpipev"), ScheduleKind::dual_pipe_v);
  EXPECT_EQ(placement_of(ScheduleKind::dual_pipe_v, 4, 1).kind, PlacementKind::v_shape);
  EXPECT_EQ(chunks_per_stage(ScheduleKind::dual_pipe_v, 1), 2);
  EXPECT_FALSE(splits_backward(ScheduleKind::dual_pipe_v));  // only some backwards
}
