// DualPipeV (pipeline/dual_pipe_v.h): its order is DeepSeek's and PyTorch's, action for action,
// its overlapped pairs marked where theirs overlap, kept adjacent by the lowering and carried by the
// grid text, malformed pairs refused in one line, drawn on a second compute track of the predicted
// trace; its m >= 2p error, its place in the schedule list.
// Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "pipeline/dual_pipe_v.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_file.h"
#include "pipeline/simulate.h"
#include "pipeline/timeline.h"
#include "tests/error_message.h"

namespace {

// The order as the grid writes it, a pair as one token ("F3&B1.1").
std::string order_text(int p, int m, int stage) {
  StageSchedule steps;
  for (const Action& a : dual_pipe_v_order(p, m, stage)) steps.push_back({a});
  return to_text(steps);
}

}  // namespace

// Written out by hand from PyTorch's ScheduleDualPipeV._calculate_single_rank_operations
// (torch/distributed/pipelining/schedules.py), phase by phase, each OVERLAP_F_B as our pair, its
// forward then its FULL_BACKWARD; deepseek-ai/DualPipe's dualpipev.py (steps 1 to 8 of
// DualPipeV.step) runs the same computes in the same order. Our ".1" is their stage 2p - 1 - rank.
TEST(DualPipeV, IsTheirOrderActionForAction) {
  // p = 2, m = 4. Rank 0: 2 F0; (F0, F1); (I1, W1, F1); pairs (F0, B1), (F1, B0); B1, pair (F1, B0);
  // B1 then, from here on split, I0; W, I0; W.
  EXPECT_EQ(order_text(2, 4, 0), "F0 F1 F2 F0.1 I0.1 W0.1 F1.1 F3&B1.1 F2.1&B0 B2.1 F3.1&B1 B3.1 I2 W2 I3 W3");
  // Rank 1, the last: 2 (F0, F1); the first (F0, B1) one after the other, then pairs; on an odd
  // rank the split starts at B1 of the second (B1, B0).
  EXPECT_EQ(order_text(2, 4, 1), "F0 F0.1 F1 F1.1 F2 B0.1 F2.1&B0 F3&B1.1 F3.1&B1 B2.1 B2 I3.1 I3 W3.1 W3");
  // p = 4, m = 8, rank 1: 4 F0; 2 (F0, F1); 2 (I1, W1, F1); 2 times the two pairs; 2 times B1 and
  // the pair (F1, B0); (B1, B0), (I1, I0); (W, I0) twice; 2 W's.
  EXPECT_EQ(order_text(4, 8, 1),
            "F0 F1 F2 F3 F4 F0.1 F5 F1.1 I0.1 W0.1 F2.1 I1.1 W1.1 F3.1 F6&B2.1 F4.1&B0 F7&B3.1 F5.1&B1 "
            "B4.1 F6.1&B2 B5.1 F7.1&B3 B6.1 B4 I7.1 I5 W7.1 I6 W5 I7 W6 W7");
}

// Each pair's two computes are adjacent steps after the lowering (so the receives both need come
// before the pair: simulate checks each input is received before its compute), on every stage as
// many as phases 4 and 5 hold, and the grid's text carries them: printed, read and lowered again,
// it is the same schedule.
TEST(DualPipeV, PairsStayAdjacentAndRoundTripThroughTheGridText) {
  for (int p : {1, 2, 4})
    for (int m : {2 * p, 2 * p + 3}) {
      const PipelineSchedule schedule = make_pipeline_schedule(ScheduleKind::dual_pipe_v, p, m, 2);
      for (int s = 0; s < p; s++) {
        const StageSchedule& steps = schedule.stages[s];
        int pairs = 0;
        for (size_t i = 1; i < steps.size(); i++)
          if (steps[i][0].overlapped) {
            pairs++;
            EXPECT_TRUE(is_compute(steps[i - 1]) && steps[i - 1][0].kind == ActionKind::forward) << to_text(steps);
          }
        EXPECT_EQ(pairs, 2 * (m - 2 * p + s + 1) + (p - s - 1) - (s == p - 1)) << "p=" << p << " m=" << m << " s=" << s;
      }
      EXPECT_TRUE(simulate(schedule.stages, {1, 1, 1, 0}, PlacementKind::v_shape).deadlock.empty());
      const PipelineSchedule again = schedule_from_grid(parse_schedule_grid(schedule_grid_text(schedule)), p, m);
      EXPECT_EQ(again.stages, schedule.stages) << "p=" << p << " m=" << m;
    }
}

// A pair is a forward then a B or I, on the two chunks of a V: anything else is one line.
TEST(DualPipeV, MalformedPairsInTheGridAreOneLine) {
  const auto error = [](const std::string& text) { return error_of([&] { parse_schedule_grid(text); }); };
  EXPECT_EQ(error("placement v\nstage 0 | F0 F0.1 F1&F1.1\n"), "line 2: 'F1&F1.1' is not a forward then a B or I (F3&B1.1)");
  EXPECT_EQ(error("placement v\nstage 0 | F0 F0.1 F1.1&B0.1\n"),
            "line 2: 'F1.1&B0.1' runs chunk 1 twice: a pair is one chunk's forward with the other's backward");
  EXPECT_EQ(error("stage 0 | F0 F0.1 F1&B0.1\n"),
            "line 1: 'F1&B0.1' pairs two computes, but only a v placement overlaps them (placement v, DualPipeV)");
  EXPECT_EQ(error("placement v\nstage 0 | F0 F0.1 F1&B0.1&B0\n"), "line 2: 'B0.1&B0': a pair is two computes, and only two");
  EXPECT_EQ(error("placement v\nstage 0 | &F0\n"), "line 2: '&F0' overlaps no compute before it");
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

// The predicted trace (--print-schedule --trace) draws a pair's backward on its stage's second
// compute track (tid p + stage), at the same time as its forward on the first.
TEST(DualPipeV, APairsBackwardIsOnTheSecondComputeTrack) {
  const PipelineSchedule schedule = make_pipeline_schedule(ScheduleKind::dual_pipe_v, 2, 4, 2);
  const Timeline timeline =
      predicted_timeline(schedule, simulate(schedule.stages, {1, 1, 1, 0}, PlacementKind::v_shape), 1e3);
  int pairs = 0;
  for (size_t k = 1; k < timeline.events.size(); k++) {
    const TimelineEvent& e = timeline.events[k];
    EXPECT_EQ(e.stream, e.name[0] == '&' ? 1 : 0) << e.name;
    if (e.stream == 1) {
      pairs++;
      EXPECT_EQ(e.start_us, timeline.events[k - 1].start_us) << e.name;
    }
  }
  EXPECT_EQ(pairs, 3 + 3);  // 3 on stage 0, and 4 on stage 1 less its first F B, not overlapped
  const std::string json = chrome_trace_json(timeline);
  EXPECT_NE(json.find("\"name\": \"&B1.1\", \"cat\": \"backward\", \"ph\": \"X\", \"ts\": 7000.000, \"dur\": 3000.000, "
                      "\"pid\": 0, \"tid\": 2}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"tid\": 3, \"args\": {\"name\": \"stage 1, second compute stream\"}"), std::string::npos);
}
