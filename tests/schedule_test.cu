// Schedules as data (pipeline/schedule.h): the text form round-trips, every schedule runs
// each microbatch's forward and backward exactly once per chunk and in that order, 1F1B's
// warm-up depth, Megatron's interleaved order and groups, the lowering's groups, the
// configuration errors and the printed grid. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/schedule.h"

namespace {

std::string error_of(auto&& call) {
  try {
    call();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

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
// schedule accepts, with v in {2, 3} for the interleaved schedule.
std::vector<Layout> valid_layouts() {
  std::vector<Layout> layouts;
  for (ScheduleKind kind : {ScheduleKind::afab, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int p : {1, 2, 4, 8})
      for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1})
        for (int v : {1, 2, 3}) {
          if ((kind == ScheduleKind::interleaved) != (v > 1)) continue;
          if (kind == ScheduleKind::interleaved && m % p != 0) continue;
          layouts.push_back({kind, p, m, v});
        }
  return layouts;
}

}  // namespace

TEST(Schedule, TextRoundTrips) {
  const std::string text = "rF0 F0 sF0+rF1 F1.2 B3.1 sB3.1+rB2.1 sF2+sB0.1+rF3+rB1.1 B10.3 sB10.3";

  const StageSchedule steps = parse_schedule(text);

  EXPECT_EQ(to_text(steps), text);
  ASSERT_EQ(steps.size(), 9u);
  EXPECT_EQ(steps[0], Step({{ActionKind::recv_forward, 0, 0}}));
  EXPECT_EQ(steps[3], Step({{ActionKind::forward, 1, 2}}));
  EXPECT_EQ(steps[5], Step({{ActionKind::send_backward, 3, 1}, {ActionKind::recv_backward, 2, 1}}));
  EXPECT_EQ(steps[6].size(), 4u);
  EXPECT_EQ(parse_action("F3.0"), (Action{ActionKind::forward, 3, 0}));  // chunk 0 may be written
}

TEST(Schedule, TextRejectsWhatIsNotAnAction) {
  for (const std::string bad : {"X3", "F", "F3.", "f3", "sF", "F3x", "rF-1", "xF3"})
    EXPECT_EQ(error_of([&] { parse_action(bad); }), "'" + bad + "' is not a schedule action (e.g. F3, B3.1, rF3, sB3)");
  for (const std::string bad : {"F3+", "sF3+rB", "+rB1"})
    EXPECT_EQ(error_of([&] { parse_schedule("F0 " + bad); }),
              "'" + bad + "' is not a schedule step (e.g. F3, B3.1, rF3, sF3+rB1)");
  EXPECT_EQ(error_of([] { parse_step("sF3+F4"); }),
            "'sF3+F4' groups a compute action with others (F and B are steps of their own)");
}

TEST(Schedule, EveryForwardAndBackwardOnceBackwardAfterForward) {
  for (const Layout& l : valid_layouts())
    for (int stage = 0; stage < l.p; stage++) {
      const std::vector<Action> compute = compute_actions(make_schedule(l.kind, l.p, l.m, l.v, stage));
      std::map<std::tuple<ActionKind, int, int>, size_t> position;  // (F or B, microbatch, chunk) -> index
      for (size_t i = 0; i < compute.size(); i++)
        EXPECT_TRUE(position.emplace(std::tuple{compute[i].kind, compute[i].microbatch, compute[i].chunk}, i).second)
            << to_text(compute[i]) << " twice on stage " << stage << " of " << schedule_name(l.kind);
      EXPECT_EQ(compute.size(), 2u * l.m * l.v);
      for (int microbatch = 0; microbatch < l.m; microbatch++)
        for (int chunk = 0; chunk < l.v; chunk++) {
          const auto f = position.find({ActionKind::forward, microbatch, chunk});
          const auto b = position.find({ActionKind::backward, microbatch, chunk});
          ASSERT_TRUE(f != position.end() && b != position.end()) << microbatch << "." << chunk;
          EXPECT_LT(f->second, b->second);
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
  // m = p: every forward first.
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::interleaved, 2, 2, 2, 1)), "F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1");
}

TEST(Schedule, InterleavedSteadyStateSharesOneGroupPerForwardBackwardPair) {
  const std::string stage0 = to_text(make_schedule(ScheduleKind::interleaved, 2, 4, 2, 0));
  // The last warm-up group also receives the first backward's gradient (Megatron's recv_next).
  EXPECT_NE(stage0.find("F1.1 sF1.1+rB0.1 F2 B0.1 sF2+sB0.1+rB1.1 F3 B1.1 sF3+sB1.1+rF2.1+rB0 F2.1"),
            std::string::npos)
      << stage0;
}

TEST(Schedule, OneStageHasNoCommunication) {
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::one_f_one_b, 1, 3, 1, 0)), "F0 B0 F1 B1 F2 B2");
  // Chunk 0 hands F0's output to chunk 1 on the same stage (warm-up (v - 1) p = 1).
  EXPECT_EQ(to_text(make_schedule(ScheduleKind::interleaved, 1, 2, 2, 0)), "F0 F0.1 B0.1 F1 B0 F1.1 B1.1 B1");
}

TEST(Schedule, InterleavedNeedsMicrobatchesAMultipleOfP) {
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 6, 2, 0); }),
            "the interleaved schedule needs --microbatches to be a multiple of --pp 4 and at least 4; got 6: "
            "use 4 or 8");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 2, 2, 0); }),
            "the interleaved schedule needs --microbatches to be a multiple of --pp 4 and at least 4; got 2: use 4");
  EXPECT_EQ(error_of([] { make_all_schedules(ScheduleKind::interleaved, 4, 13, 2); }),
            "the interleaved schedule needs --microbatches to be a multiple of --pp 4 and at least 4; got 13: "
            "use 12 or 16");
}

TEST(Schedule, ConfigurationErrorsSayWhatToChange) {
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::one_f_one_b, 4, 8, 2, 0); }),
            "--virtual-stages 2 needs --schedule interleaved (1f1b runs one chunk per stage)");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::afab, 4, 0, 1, 0); }), "--microbatches 0 must be at least 1");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::afab, 4, 8, 1, 4); }), "stage 4 is outside [0, 4)");
  EXPECT_EQ(error_of([] { parse_schedule_kind("gpipe"); }), "unknown schedule 'gpipe' (use afab, 1f1b or interleaved)");
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(schedule_name(parse_schedule_kind("interleaved")), "interleaved");
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
