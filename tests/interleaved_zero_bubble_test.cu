// The interleaved zero-bubble schedule (pipeline/interleaved_zero_bubble.h): the order at p = 2,
// m = 4, v = 2 as PyTorch's algorithm gives it, worked out by hand; every order a valid grid; the
// idle share at p = 4, m = 8, v = 2 the paper's ZB-H1 bubble on a chunk, below interleaved 1F1B's and
// zb-h1's; no deadlock whatever the costs; the errors. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/interleaved_zero_bubble.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_file.h"
#include "pipeline/simulate.h"
#include "tests/error_message.h"

namespace {

// Idle shares are ratios of small integers, exact to about 1e-16.
constexpr double kExact = 1e-12;

std::vector<std::vector<Action>> orders_of(int p, int m, int v) {
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < p; s++) orders.push_back(zb_interleaved_order(p, m, v, s));
  return orders;
}

std::string text_of(const std::vector<Action>& order) {
  StageSchedule steps;
  for (const Action& a : order) steps.push_back({a});
  return to_text(steps);
}

// The m that fit PyTorch's rule (m a multiple of max(1, m / p)) among fewer than p, p, p + 1
// (rounds 1), 2p, 3p and 4p + 2 (rounds 4, two more per round).
std::vector<int> microbatch_counts(int p) {
  std::vector<int> counts;
  for (int m : {1, p - 1, p, p + 1, 2 * p, 3 * p, 4 * p + 2})
    if (m >= 1 && m % std::max(1, m / p) == 0) counts.push_back(m);
  return counts;
}

}  // namespace

// PyTorch's _calculate_single_rank_operations for p = 2, m = 4, v = 2, followed by hand: rounds =
// max(1, 4 / 2) = 2 of n = 2 microbatches; forward k runs chunk k / 2 mod 2 (F0 F1 on chunk 0, then
// F0.1 F1.1, then F2 F3, F2.1 F3.1), I k chunk 1 - k / 2 mod 2 (I0.1 I1.1 I0 I1 I2.1 I3.1 I2 I3);
// warm-up (v - 1) n + p - 1 - s: 3 on stage 0, 2 on stage 1; a W after I k from k = s on.
TEST(InterleavedZeroBubble, OrderAtTwoStagesIsPyTorchs) {
  EXPECT_EQ(text_of(zb_interleaved_order(2, 4, 2, 0)),
            "F0 F1 F0.1 F1.1 I0.1 W0.1 F2 I1.1 W1.1 F3 I0 W0 F2.1 I1 W1 F3.1 I2.1 W2.1 I3.1 W3.1 I2 W2 I3 W3");
  EXPECT_EQ(text_of(zb_interleaved_order(2, 4, 2, 1)),
            "F0 F1 F0.1 I0.1 F1.1 I1.1 W0.1 F2 I0 W1.1 F3 I1 W0 F2.1 I2.1 W1 F3.1 I3.1 W2.1 I2 W3.1 I3 W2 W3");
  EXPECT_EQ(zb_interleaved_warmup(4, 8, 2, 0), 7);  // (2 - 1) 4 + 3
  EXPECT_EQ(zb_interleaved_warmup(4, 8, 3, 3), 8);  // (3 - 1) 4
  EXPECT_EQ(zb_interleaved_warmup(4, 10, 2, 0), 8);  // 2 rounds of 5: 5 + 3
  EXPECT_EQ(zb_interleaved_warmup(4, 2, 2, 0), 4);  // capped at m v
}

// schedule_from_grid checks what a schedule file must satisfy: every microbatch's F, I and W once
// per chunk in that order, each chunk's F's and W's in microbatch order (so the gradients add up in
// every schedule's order), inputs that come, and no deadlock once lowered.
TEST(InterleavedZeroBubble, EveryOrderIsAValidGrid) {
  for (int p = 1; p <= 4; p++)
    for (int v = 2; v <= 3; v++)
      for (int m : microbatch_counts(p)) {
        const PipelineSchedule schedule = schedule_from_grid({PlacementKind::ring, orders_of(p, m, v)}, p, m);
        EXPECT_EQ(schedule.placement.v, v) << "p " << p << " m " << m << " v " << v;
        const PipelineSchedule built = make_pipeline_schedule(ScheduleKind::zb_interleaved, p, m, v);
        EXPECT_EQ(built.placement.kind, PlacementKind::ring);
        for (int s = 0; s < p; s++) EXPECT_EQ(compute_actions(built.stages[s]), orders_of(p, m, v)[s]);
      }
}

// Equal costs per chunk (t_f = t_i = t_w = 1): the paper's ZB-H1 bubble, (p - 1)(t_f + t_i - t_w),
// is 3 on a chunk, so the step spans the m v 3 = 48 of work plus 3: idle 3/51 on every stage.
// Interleaved 1F1B waits (p - 1)(t_f + t_b) = 9 (idle 9/57), and zb-h1 on whole stages (costs 2
// per stage) 6 of 54, 1/9: both above.
TEST(InterleavedZeroBubble, IdleShareAtFourStagesIsZbH1sBubbleOnAChunk) {
  auto idle_shares = [](ScheduleKind kind, int v) {
    const PipelineSchedule schedule = make_pipeline_schedule(kind, 4, 8, v);
    const Simulation run = simulate(schedule.stages, {1, 1, 1, 0}, schedule.placement.kind);
    EXPECT_EQ(run.deadlock, "") << schedule_name(kind);
    std::vector<double> shares;
    for (const StageSimulation& stage : run.stages) shares.push_back(stage.idle_share);
    return shares;
  };
  const std::vector<double> ours = idle_shares(ScheduleKind::zb_interleaved, 2);
  const std::vector<double> interleaved = idle_shares(ScheduleKind::interleaved, 2);
  const std::vector<double> zb_h1 = idle_shares(ScheduleKind::zb_h1, 1);
  ASSERT_EQ(ours.size(), 4u);
  for (int s = 0; s < 4; s++) {
    EXPECT_NEAR(ours[s], 3.0 / 51, kExact) << "stage " << s;
    EXPECT_NEAR(interleaved[s], 9.0 / 57, kExact) << "stage " << s;
    EXPECT_NEAR(zb_h1[s], 1.0 / 9, kExact) << "stage " << s;
  }
}

TEST(InterleavedZeroBubble, RunsWithoutDeadlockWhateverTheCosts) {
  for (int p = 1; p <= 4; p++)
    for (int v = 2; v <= 3; v++)
      for (int m : microbatch_counts(p)) {
        const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::zb_interleaved, p, m, v);
        for (const StepCosts& costs : {StepCosts{1, 1, 1, 0}, StepCosts{1, 3, 0.5, 0}, StepCosts{2, 1, 3, 0.5}})
          EXPECT_EQ(simulate(stages, costs).deadlock, "") << "p " << p << " m " << m << " v " << v;
      }
}

TEST(InterleavedZeroBubble, ConfigurationErrorsSayWhatToChange) {
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::zb_interleaved, 4, 8, 1, 0); }),
            "--schedule zb-interleaved needs --virtual-stages 2 or more (chunks per stage); got 1");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::zb_interleaved, 4, 9, 2, 0); }),
            "--schedule zb-interleaved needs --microbatches a multiple of its rounds, max(1, 9 / --pp 4) = 2, as "
            "PyTorch's; got 9: use 8 or 10");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::zb_interleaved, 4, 0, 2, 0); }),
            "--microbatches 0 must be at least 1");
  EXPECT_EQ(error_of([] { zb_interleaved_order(2, 4, 2, 2); }), "stage 2 is outside [0, 2)");
  EXPECT_EQ(parse_schedule_kind("zb-interleaved"), ScheduleKind::zb_interleaved);
  EXPECT_EQ(placement_of(ScheduleKind::zb_interleaved, 4, 3).v, 3);
  EXPECT_EQ(chunks_per_stage(ScheduleKind::zb_interleaved, 3), 3);
  EXPECT_TRUE(splits_backward(ScheduleKind::zb_interleaved));
}
