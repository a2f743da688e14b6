// Schedules as data (pipeline/schedule.h, zero_bubble.h, schedule_file.h): the text form
// round-trips, every schedule runs each microbatch's forward and backward (B, or I then W)
// exactly once per chunk and in that order, 1F1B's warm-up depth, Megatron's interleaved order
// and groups (its microbatch groups and errors: tests/interleaved_test.cu), the zero-bubble orders (ZB-H1 against the paper's Figure 3), the placements and
// the V's local turn, the lowering's groups, the configuration errors, the printed grid, and
// schedule files: parsed, checked and rejected with the step marked. Host code only; runs in
// both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/schedule.h"
#include "pipeline/schedule_file.h"
#include "pipeline/simulate.h"
#include "pipeline/zero_bubble.h"
#include "tests/error_message.h"

namespace {

std::string compute_text(const StageSchedule& steps) {
  StageSchedule compute;
  for (const Action& a : compute_actions(steps)) compute.push_back({a});
  return to_text(compute);
}

struct Layout {
  ScheduleKind kind;
  int p, m, v;
};


// Every layout of the issue's grid (p in {1, 2, 4, 8}, m in {1, p, 2p, 4p, 3p + 1}) that the
// schedule accepts, with v in {2, 3} for the interleaved schedules and v = 2 for the V-shaped ones.
std::vector<Layout> valid_layouts() {
  std::vector<Layout> layouts;
  for (ScheduleKind kind : all_schedule_kinds())
    for (int p : {1, 2, 4, 8})
      for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1})
        for (int v : {1, 2, 3}) {
          const bool interleaves = kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_interleaved;
          if (v != chunks_per_stage(kind, interleaves ? v : 1)) continue;
          if (interleaves && v == 1) continue;
          if (kind == ScheduleKind::interleaved && m % p != 0) continue;
          if (kind == ScheduleKind::zb_interleaved && m % std::max(1, m / p) != 0) continue;  // PyTorch's rounds
          if (kind == ScheduleKind::dual_pipe_v && m < 2 * p) continue;
          layouts.push_back({kind, p, m, v});
        }
  return layouts;
}

std::string grid_error(const std::string& text, int p, int m) {
  return error_of([&] { schedule_from_grid(parse_schedule_grid(text), p, m); });
}

}  // namespace

TEST(Schedule, TextRoundTrips) {
  const std::string text = "rF0 F0 sF0+rF1 F1.2 B3.1 sB3.1+rB2.1 sF2+sB0.1+rF3+rB1.1 B10.3 sB10.3 I4 W4.1";

  const StageSchedule steps = parse_schedule(text);

  EXPECT_EQ(to_text(steps), text);
  ASSERT_EQ(steps.size(), 11u);
  EXPECT_EQ(steps[9], Step({{ActionKind::backward_input, 4, 0}}));
  EXPECT_EQ(steps[10], Step({{ActionKind::backward_weight, 4, 1}}));
  EXPECT_EQ(steps[0], Step({{ActionKind::recv_forward, 0, 0}}));
  EXPECT_EQ(steps[3], Step({{ActionKind::forward, 1, 2}}));
  EXPECT_EQ(steps[5], Step({{ActionKind::send_backward, 3, 1}, {ActionKind::recv_backward, 2, 1}}));
  EXPECT_EQ(steps[6].size(), 4u);
  EXPECT_EQ(parse_action("F3.0"), (Action{ActionKind::forward, 3, 0}));  // chunk 0 may be written
}

TEST(Schedule, TextRejectsWhatIsNotAnAction) {
  for (const std::string bad : {"X3", "F", "F3.", "f3", "sF", "F3x", "rF-1", "xF3", "sI3", "rW3", "I"})
    EXPECT_EQ(error_of([&] { parse_action(bad); }),
              "'" + bad + "' is not a schedule action (e.g. F3, B3.1, I3, W3.1, rF3, sB3)");
  for (const std::string bad : {"F3+", "sF3+rB", "+rB1"})
    EXPECT_EQ(error_of([&] { parse_schedule("F0 " + bad); }),
              "'" + bad + "' is not a schedule step (e.g. F3, B3.1, I3, W3, rF3, sF3+rB1)");
  EXPECT_EQ(error_of([] { parse_step("sF3+F4"); }),
            "'sF3+F4' groups a compute action with others (F, B, I and W are steps of their own)");
  EXPECT_EQ(error_of([] { parse_step("sB3+W3"); }),
            "'sB3+W3' groups a compute action with others (F, B, I and W are steps of their own)");
}

TEST(Schedule, EveryForwardAndBackwardOnceBackwardAfterForward) {
  for (const Layout& l : valid_layouts())
    for (int stage = 0; stage < l.p; stage++) {
      SCOPED_TRACE(schedule_name(l.kind) + " p " + std::to_string(l.p) + " m " + std::to_string(l.m) + " v " +
                   std::to_string(l.v) + " stage " + std::to_string(stage));
      const std::vector<Action> compute = compute_actions(make_schedule(l.kind, l.p, l.m, l.v, stage));
      std::map<std::tuple<ActionKind, int, int>, size_t> position;  // (kind, microbatch, chunk) -> index
      for (size_t i = 0; i < compute.size(); i++)
        EXPECT_TRUE(position.emplace(std::tuple{compute[i].kind, compute[i].microbatch, compute[i].chunk}, i).second)
            << to_text(compute[i]) << " twice";
      // dualpipev splits some backwards only (pipeline/dual_pipe_v.h): 2 computes per microbatch
      // and chunk, and a W for each I.
      const size_t inputs = std::count_if(compute.begin(), compute.end(),
                                          [](const Action& a) { return a.kind == ActionKind::backward_input; });
      EXPECT_EQ(compute.size(), 2u * l.m * l.v + inputs);
      if (splits_backward(l.kind)) {
        EXPECT_EQ(inputs, size_t(l.m) * l.v);
      }
      for (int microbatch = 0; microbatch < l.m; microbatch++)
        for (int chunk = 0; chunk < l.v; chunk++) {
          const auto at = [&](ActionKind kind) { return position.find({kind, microbatch, chunk}); };
          const bool split = at(ActionKind::backward_input) != position.end();
          const auto f = at(ActionKind::forward);
          const auto b = at(split ? ActionKind::backward_input : ActionKind::backward);
          ASSERT_TRUE(f != position.end() && b != position.end()) << microbatch << "." << chunk;
          EXPECT_LT(f->second, b->second);
          if (!split) continue;
          const auto w = at(ActionKind::backward_weight);
          ASSERT_TRUE(w != position.end()) << microbatch << "." << chunk;
          EXPECT_LT(b->second, w->second);
        }
    }
}

// Each chunk's forwards, and its B's or W's (the computes that add parameter gradients), run
// in microbatch order in every schedule: the sums are then the same in every schedule.
TEST(Schedule, EveryScheduleAddsGradientsInMicrobatchOrder) {
  for (const Layout& l : valid_layouts())
    for (int stage = 0; stage < l.p; stage++) {
      std::map<std::pair<bool, int>, int> last;  // (a forward, chunk) -> last microbatch
      for (const Action& a : compute_actions(make_schedule(l.kind, l.p, l.m, l.v, stage))) {
        if (a.kind == ActionKind::backward_input) continue;
        const auto key = std::pair{a.kind == ActionKind::forward, a.chunk};
        EXPECT_TRUE(!last.count(key) || last[key] < a.microbatch)
            << schedule_name(l.kind) << " p " << l.p << " m " << l.m << " stage " << stage << ": " << to_text(a);
        last[key] = a.microbatch;
      }
    }
}

TEST(Schedule, AfabRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::afab, 4, 3, 1, 2)), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::afab, 2, 2, 1, 0)), "F0 sF0 F1 sF1+rB0 B0 rB1 B1");
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::afab, 2, 2, 1, 1)), "rF0 F0 rF1 F1 B0 sB0 B1 sB1");
}

TEST(Schedule, OneFOneBWarmupIsPMinusSMinusOneForwards) {
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::one_f_one_b, 4, 8, 1, 0)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::one_f_one_b, 4, 8, 1, 2)),
            "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::one_f_one_b, 4, 2, 1, 0)), "F0 F1 B0 B1");
  // Forwards before the first backward: the warm-up min(p - s - 1, m), plus the steady
  // state's first forward if microbatches are left.
  for (int p : {2, 4, 8})
    for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1})
      for (int stage = 0; stage < p; stage++) {
        const std::vector<Action> compute = one_f_one_b_order(p, m, stage);
        int leading_forwards = 0;
        while (compute[leading_forwards].kind == ActionKind::forward) leading_forwards++;
        EXPECT_EQ(leading_forwards, std::min(p - stage, m)) << "p " << p << " m " << m << " stage " << stage;
      }
}

TEST(Schedule, OneFOneBUsesMegatronsCombinedSendsAndReceives) {
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::one_f_one_b, 2, 3, 1, 0)),
            "F0 sF0 F1 sF1+rB0 B0 F2 sF2+rB1 B1 rB2 B2");
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::one_f_one_b, 2, 3, 1, 1)),
            "rF0 F0 B0 sB0+rF1 F1 B1 sB1+rF2 F2 B2 sB2");
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::one_f_one_b, 3, 3, 1, 1)),
            "rF0 F0 sF0+rF1 F1 sF1+rB0 B0 sB0+rF2 F2 sF2+rB1 B1 sB1+rB2 B2 sB2");
}

TEST(Schedule, InterleavedIsMegatronsOrder) {
  // Megatron: the k-th forward runs chunk (k mod pv) / p on microbatch (k / pv) p + k mod p,
  // backwards the chunks in reverse; warm-up 2 (p - s - 1) + (v - 1) p = 4 and 2 here.
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::interleaved, 2, 4, 2, 0)),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::interleaved, 2, 4, 2, 1)),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
}

// Megatron's overlap_p2p_comm: a forward's input is received in the group after the stage's
// previous forward (send_forward_recv_forward), a backward's gradient in the group after the
// previous backward (send_backward_recv_backward), so each arrives while the compute before its use
// runs; the first of each direction is received just before it.
TEST(Schedule, InterleavedPostsEachReceiveAfterThePreviousComputeOfItsDirection) {
  const std::string stage0 = to_text(make_schedule(ScheduleKind::interleaved, 2, 4, 2, 0));
  EXPECT_NE(stage0.find("F2 sF2+rB0.1 B0.1 sB0.1+rB1.1 F3 sF3+rF2.1 B1.1 sB1.1+rB0 F2.1 sF2.1+rF3.1 B0 rB1 F3.1"),
            std::string::npos)
      << stage0;
}

// The same posting in 1F1B: stage 1 waits for B1's gradient right after B0, before its F2; stage 2
// sends that gradient only after its own F2, whose input stage 1 sends after its F2. A cycle,
// whatever the costs: 1F1B's warm-up leaves no compute to overlap a receive with, so it posts each
// receive just before its use.
TEST(Schedule, OneFOneBCannotPostReceivesAfterThePreviousComputeOfTheirDirection) {
  const Placement placement = placement_of(ScheduleKind::one_f_one_b, 3, 1);
  std::vector<StageSchedule> stages;
  for (int s = 0; s < 3; s++)
    stages.push_back(add_communication(one_f_one_b_order(3, 3, s), placement, s,
                                       ReceivePosting::after_previous_of_direction));
  EXPECT_EQ(to_text(stages[1]), "rF0 F0 sF0+rF1 F1 sF1+rB0+rF2 B0 sB0+rB1 F2 sF2 B1 sB1+rB2 B2 sB2");
  EXPECT_NE(simulate(stages, {1, 2, 0, 0}).deadlock, "");
  EXPECT_EQ(simulate(make_all_schedules(ScheduleKind::one_f_one_b, 3, 3, 1), {1, 2, 0, 0}).deadlock, "");
}

// The lowering in time order (add_communication_in_time_order) of ZB-H1 on 2 stages: each
// message placed just before its consumer, the groups in Megatron's shape.
TEST(Schedule, ZeroBubbleLoweringGroupsEachMessageBeforeItsConsumer) {
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::zb_h1, 2, 3, 1, 0)),
            "F0 sF0 F1 sF1+rB0 I0 W0 F2 sF2+rB1 I1 W1 rB2 I2 W2");
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::zb_h1, 2, 3, 1, 1)),
            "rF0 F0 I0 sB0+rF1 F1 I1 W0 sB1+rF2 F2 I2 sB2 W1 W2");
}

TEST(Schedule, OneStageHasNoCommunication) {
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::one_f_one_b, 1, 3, 1, 0)), "F0 B0 F1 B1 F2 B2");
  // Chunk 0 hands F0's output to chunk 1 on the same stage (warm-up (v - 1) p = 1).
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::interleaved, 1, 2, 2, 0)), "F0 F0.1 B0.1 F1 B0 F1.1 B1.1 B1");
}

// The paper's Figure 3 (top), ZB-H1 on 4 stages and 8 microbatches, counted from 0 (the figure
// counts stages and microbatches from 1) and with our I for its B.
TEST(Schedule, ZeroBubbleH1IsThePapersFigure3) {
  EXPECT_EQ(format_grid(make_all_schedules(ScheduleKind::zb_h1, 4, 8, 1)),
            "stage 0 | F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7\n"
            "stage 1 | F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7\n"
            "stage 2 | F0 F1 I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7\n"
            "stage 3 | F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7\n");
}

// ZB-H2: 2 (p - s) - 1 warm-up forwards, up to 2 s pairs (I, F), then triples (I, W, F): every
// stage runs 2p - 1 forwards before its first W.
TEST(Schedule, ZeroBubbleH2WarmsUpWithTwoPMinusTwoSMinusOneForwards) {
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::zb_h2, 4, 8, 1, 0)),
            "F0 F1 F2 F3 F4 F5 F6 I0 W0 F7 I1 W1 I2 W2 I3 W3 I4 W4 I5 W5 I6 W6 I7 W7");
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::zb_h2, 4, 8, 1, 3)),
            "F0 I0 F1 I1 F2 I2 F3 I3 F4 I4 F5 I5 F6 I6 W0 F7 I7 W1 W2 W3 W4 W5 W6 W7");
  for (int p : {2, 4, 8})
    for (int stage = 0; stage < p; stage++) {
      const std::vector<Action> compute = zb_h2_order(p, 4 * p, stage);
      int forwards = 0;
      for (size_t i = 0; compute[i].kind != ActionKind::backward_weight; i++)
        forwards += compute[i].kind == ActionKind::forward;
      EXPECT_EQ(forwards, 2 * p - 1) << "p " << p << " stage " << stage;
      size_t warmup = 0;
      while (compute[warmup].kind == ActionKind::forward) warmup++;
      EXPECT_EQ(warmup, size_t(2 * (p - stage) - 1)) << "p " << p << " stage " << stage;
    }
}

// ZB-V on stage 3 of 4, m = 8, by the rule of zero_bubble.h worked by hand: 1 forward on chunk
// 0, 3 pairs (F.1, F), 1 triple (F.1, I.1, W.1), 4 steady rounds, 3 pairs (I, I.1), 1 pair (I, W),
// chunk 1's W's, chunk 0's.
TEST(Schedule, ZeroBubbleVFollowsItsRule) {
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::zb_v, 4, 8, 2, 3)),
            "F0 F0.1 F1 F1.1 F2 F2.1 F3 F3.1 I0.1 W0.1 "
            "F4 I0 W0 F4.1 I1.1 W1.1 F5 I1 W1 F5.1 I2.1 W2.1 F6 I2 W2 F6.1 I3.1 W3.1 F7 I3 W3 F7.1 I4.1 W4.1 "
            "I4 I5.1 I5 I6.1 I6 I7.1 I7 W4 W5.1 W6.1 W7.1 W5 W6 W7");
  // Stage 0: 7 forwards on chunk 0, then 4 triples on chunk 1.
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::zb_v, 4, 8, 2, 0)).substr(0, 68),
            "F0 F1 F2 F3 F4 F5 F6 F0.1 I0.1 W0.1 F1.1 I1.1 W1.1 F2.1 I2.1 W2.1 F3");
}

// The V placement: stage s holds virtual stages s and 2p - 1 - s; the ring c p + s.
TEST(Schedule, PlacementsMapChunksToVirtualStages) {
  const Placement v{PlacementKind::v_shape, 4, 2}, ring{PlacementKind::ring, 4, 2};
  for (int s = 0; s < 4; s++)
    for (int c = 0; c < 2; c++) {
      EXPECT_EQ(v.virtual_stage(s, c), c == 0 ? s : 7 - s);
      EXPECT_EQ(ring.virtual_stage(s, c), c * 4 + s);
      for (const Placement& placement : {v, ring}) {
        EXPECT_EQ(placement.stage_of(placement.virtual_stage(s, c)), s);
        EXPECT_EQ(placement.chunk_of(placement.virtual_stage(s, c)), c);
      }
    }
  EXPECT_TRUE(v.is_first(0, 0) && v.is_last(0, 1) && !v.is_last(3, 1));
}

// ZB-V's turn on the last stage is local (no message between F3 and F3.1 there), its stage 0
// receives chunk 1's input from stage 1, and no stage talks to one that is not its neighbour.
TEST(Schedule, ZeroBubbleVTurnsLocallyOnTheLastStage) {
  const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::zb_v, 4, 8, 2);
  const std::string last = to_text(stages[3]);
  EXPECT_EQ(last.find("sF0 "), std::string::npos) << last;
  EXPECT_EQ(last.find("rF0.1"), std::string::npos) << last;
  EXPECT_EQ(last.find("sB0.1"), std::string::npos) << last;
  EXPECT_NE(to_text(stages[0]).find("rF0.1"), std::string::npos);
  EXPECT_EQ(to_text(stages[0]).find("sF7.1"), std::string::npos) << "the head is on stage 0: its output goes nowhere";
}

TEST(Schedule, ConfigurationErrorsSayWhatToChange) {
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::one_f_one_b, 4, 8, 2, 0); }),
            "--virtual-stages 2 needs --schedule interleaved (1f1b runs one chunk per stage)");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::afab, 4, 0, 1, 0); }), "--microbatches 0 must be at least 1");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::afab, 4, 8, 1, 4); }), "stage 4 is outside [0, 4)");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::zb_v, 4, 8, 3, 0); }),
            "--virtual-stages 3 needs --schedule interleaved (zb-v runs two chunks per stage)");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::zb_h1, 4, 8, 2, 0); }),
            "--virtual-stages 2 needs --schedule interleaved (zb-h1 runs one chunk per stage)");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::zb_h2, 4, 0, 1, 0); }), "--microbatches 0 must be at least 1");
  EXPECT_EQ(error_of([] { parse_schedule_kind("gpipe"); }),
            "unknown schedule 'gpipe' (use afab, 1f1b, interleaved, zb-h1, zb-h2, zb-v, v-half, v-min, looped-bfs, zb-interleaved, dualpipev)");
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  for (ScheduleKind kind : all_schedule_kinds()) EXPECT_EQ(parse_schedule_kind(schedule_name(kind)), kind);
}

// The zero-bubble schedules take every (p, m): fewer microbatches than they are built for
// (p for ZB-H1, 2p - 1 for ZB-H2 and ZB-V) only lengthen the bubble (tests/simulate_test.cu).
TEST(Schedule, ZeroBubbleSchedulesTakeAnyMicrobatchCount) {
  for (ScheduleKind kind : {ScheduleKind::zb_h1, ScheduleKind::zb_h2, ScheduleKind::zb_v})
    for (int p = 1; p <= 8; p++)
      for (int m = 1; m <= 2 * p + 1; m++)
        EXPECT_EQ(make_all_schedules(kind, p, m, 1).size(), size_t(p)) << schedule_name(kind);
}

// A schedule file: the grid --print-schedule prints, parsed back, with comments, a placement line
// and the stages in order; what is not a grid is named with its line.
TEST(ScheduleFile, ParsesThePrintedGrid) {
  const PipelineSchedule zb_v = make_pipeline_schedule(ScheduleKind::zb_v, 2, 3, 2);
  const ScheduleGrid grid = parse_schedule_grid("# edited\n" + schedule_grid_text(zb_v) + "\n");
  EXPECT_EQ(grid.placement, PlacementKind::v_shape);
  ASSERT_EQ(grid.stages.size(), 2u);
  for (int s = 0; s < 2; s++) EXPECT_EQ(grid.stages[s], compute_actions(zb_v.stages[s]));
  const PipelineSchedule again = schedule_from_grid(grid, 2, 3);
  EXPECT_EQ(again.placement.kind, PlacementKind::v_shape);
  EXPECT_EQ(again.placement.v, 2);
  EXPECT_EQ(again.stages, zb_v.stages) << "zb-v is lowered as a file is";

  EXPECT_EQ(error_of([] { parse_schedule_grid("stage 0 | F0 B0\nstage 2 | F0 B0\n"); }),
            "line 2: 'stage 2 | F0 B0' is not 'stage 1 | <computes>' (stages in order)");
  EXPECT_EQ(error_of([] { parse_schedule_grid("stage 0 | F0 sF0 B0\n"); }),
            "line 1: 'sF0' is a transfer: the file lists computes only (F, B, I, W), transfers are added");
  EXPECT_EQ(error_of([] { parse_schedule_grid("stage 0 | F0 X0\n"); }),
            "line 1: 'X0' is not a schedule action (e.g. F3, B3.1, I3, W3.1, rF3, sB3)");
  EXPECT_EQ(error_of([] { parse_schedule_grid("stage 0 | F0 B0\nplacement v\n"); }),
            "line 2: 'placement v': one line 'placement ring' or 'placement v' may come first");
  EXPECT_EQ(error_of([] { parse_schedule_grid("# nothing\n"); }), "the schedule has no 'stage 0 | ...' line");
}

// A missing W, a W before its I, a microbatch out of order, a repeat, both B and I: each named
// with the grid and the stage's step marked.
TEST(ScheduleFile, RejectsAMissingOrMisplacedComputeWithTheStepMarked) {
  EXPECT_EQ(grid_error("stage 0 | F0 F1 I0 W0 I1\nstage 1 | F0 I0 F1 I1 W0 W1\n", 2, 2),
            "schedule error: stage 0 step 4 has no W1 after I1: every microbatch's F, then B or I then W, exactly "
            "once per chunk\n"
            "stage 0 | F0   F1   I0   W0   >I1<\n"
            "stage 1 | F0   I0   F1   I1   W0   W1");
  EXPECT_NE(grid_error("stage 0 | F0 W0 I0\n", 1, 1).find("stage 0 step 1 runs W0 before I0"), std::string::npos);
  EXPECT_NE(grid_error("stage 0 | F0 F1 B1 B0\n", 1, 2).find("stage 0 step 3 runs B0 after microbatch 1's"),
            std::string::npos);
  EXPECT_NE(grid_error("stage 0 | F0 B0 B0\n", 1, 1).find("stage 0 step 2 repeats B0"), std::string::npos);
  EXPECT_NE(grid_error("stage 0 | F0 I0 B0 W0\n", 1, 1).find("stage 0 step 2 runs both B0 and I0"),
            std::string::npos);
  EXPECT_NE(grid_error("stage 0 | F0 B0 F1 B1\n", 1, 1).find("stage 0 step 2 runs F1, but --microbatches is 1"),
            std::string::npos);
  EXPECT_NE(grid_error("stage 0 | F0 B0\n", 2, 1).find("the schedule has 1 stages, but the pipeline has 2 (--pp)"),
            std::string::npos);
  EXPECT_NE(grid_error("stage 0 | F0 B0\nstage 1 | B0\n", 2, 1).find("stage 1 step 0 runs B0 before F0"),
            std::string::npos);
}

// Stage 0 waits for I0's gradient before it sends F1's activation, which stage 1 needs before
// its I0: the orders wait for each other, and the report names both waits with the grid.
TEST(ScheduleFile, RejectsOrdersThatWaitForEachOther) {
  EXPECT_EQ(grid_error("stage 0 | F0 I0 F1 W0 I1 W1\nstage 1 | F0 F1 I0 I1 W0 W1\n", 2, 2),
            "schedule error: deadlock:\n"
            "stage 0 waits at step 1 (I0) for the gradient of microbatch 0 from stage 1 chunk 0\n"
            "stage 1 waits at step 1 (F1) for the activation of microbatch 1 from stage 0 chunk 0\n"
            "stage 0 | F0   >I0< F1   W0   I1   W1\n"
            "stage 1 | F0   >F1< I0   I1   W0   W1");
}

TEST(Schedule, GridHasOneRowPerStage) {
  const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::one_f_one_b, 2, 2, 1);

  EXPECT_EQ(format_grid(stages),
            "stage 0 | F0 F1 B0 B1\n"
            "stage 1 | F0 B0 F1 B1\n");
  EXPECT_EQ(format_grid_with_communication(stages, {-1, 2}),
            "stage 0 | F0      sF0     F1      sF1+rB0 B0      rB1     B1\n"
            "stage 1 | rF0     F0      >B0<    sB0+rF1 F1      B1      sB1\n");
}
