// The simulators at per-microbatch lengths (issue 34; pipeline/simulate.h's StepCosts::lengths):
// a microbatch's F and I scaled by (1 - q) r + q r^2 and its W by r (r = T / maxT, q the
// attention's share), checked against numbers and a 1F1B timeline derived by hand; every
// microbatch at maxT gives the fixed-length simulation exactly. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/simulate.h"

namespace {

// Every time below is a sum of dyadic fractions (halves, eighths), exact in double.
constexpr double kExact = 1e-12;

}  // namespace

// T = 4 of maxT 8 (r = 1/2) with the attention half the work (q = 1/2): F and I take
// 1/2 * 1/2 + 1/2 * 1/4 = 3/8 of their cost at maxT, W half of its.
TEST(SimulatorLengths, ForwardAndInputScaleWithTAndTSquaredWeightWithT) {
  const LengthScale scale = length_scale(4, 8, 0.5);
  EXPECT_NEAR(scale.forward_and_input, 0.375, kExact);
  EXPECT_NEAR(scale.weight, 0.5, kExact);
  StepCosts costs{2, 1, 1, 0};
  costs.lengths = {length_scale(8, 8, 0.5), scale};

  EXPECT_EQ(compute_time(costs, parse_action("F1")), 2 * 0.375);
  EXPECT_EQ(compute_time(costs, parse_action("B1")), 0.375 + 0.5);
  EXPECT_EQ(compute_time(costs, parse_action("I1")), 0.375);
  EXPECT_EQ(compute_time(costs, parse_action("W1")), 0.5);
  EXPECT_EQ(compute_time(costs, parse_action("B0")), 2);
}

// 1F1B, p = 2, m = 2, F = 1 and B = 2 at maxT, no latency; microbatch 0 at half of maxT (q = 0:
// every cost halves), microbatch 1 at maxT. By hand: stage 0 runs F0 [0, 0.5] and F1 [0.5, 1.5];
// stage 1 F0 [0.5, 1] and B0 [1, 2]; the crossing (stage 0 sends F1 at 1.5, stage 1 sends B0's
// gradient at 2) completes at 2; stage 0 runs B0 [2, 3], stage 1 F1 [2, 3] and B1 [3, 5]; stage 0
// B1 [5, 7]. At fixed length the same step takes 9 (Simulator.TimelinePlacesComputeAtItsSimulatedTime).
TEST(SimulatorLengths, OneFOneBWithAShortMicrobatchFollowsTheHandTimeline) {
  const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::one_f_one_b, 2, 2, 1);
  StepCosts costs{1, 1, 1, 0};
  costs.lengths = {length_scale(4, 8, 0), length_scale(8, 8, 0)};
  const Simulation simulation = simulate(stages, costs);

  // [start, end) of each compute, in list order, per stage.
  const std::vector<std::vector<std::pair<double, double>>> expected = {
      {{0, 0.5}, {0.5, 1.5}, {2, 3}, {5, 7}}, {{0.5, 1}, {1, 2}, {2, 3}, {3, 5}}};
  for (int s = 0; s < 2; ++s) {
    std::vector<std::pair<double, double>> computes;
    for (size_t i = 0; i < stages[s].size(); ++i)
      if (is_compute(stages[s][i])) computes.push_back({simulation.start_time[s][i], simulation.end_time[s][i]});
    EXPECT_EQ(computes, expected[s]) << "stage " << s;
  }
  EXPECT_EQ(simulation.makespan, 7);
  EXPECT_NEAR(simulation.stages[0].idle_share, 1 - 4.5 / 7, kExact);
  std::vector<std::vector<Action>> orders = {one_f_one_b_order(2, 2, 0), one_f_one_b_order(2, 2, 1)};
  EXPECT_EQ(simulate_dataflow(orders, costs).makespan, 7);
  EXPECT_EQ(simulate_transfer_stream(stages, costs).makespan, 7);
}

// Every microbatch at maxT is the fixed-length step, for every schedule kind.
TEST(SimulatorLengths, EveryMicrobatchAtMaxTIsTheFixedLengthStep) {
  const int p = 4, m = 8;
  const StepCosts fixed{1, 1.5, 0.5, 0.25};
  StepCosts at_max = fixed;
  at_max.lengths.assign(m, length_scale(64, 64, 0.3));
  for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::interleaved, ScheduleKind::zb_h1}) {
    const int v = kind == ScheduleKind::interleaved ? 2 : 1;
    const std::vector<StageSchedule> stages = make_all_schedules(kind, p, m, v);
    EXPECT_EQ(simulate(stages, at_max).makespan, simulate(stages, fixed).makespan);
    EXPECT_EQ(simulate_transfer_stream(stages, at_max).makespan, simulate_transfer_stream(stages, fixed).makespan);
  }
}

TEST(SimulatorLengths, AMicrobatchWithoutALengthIsAnError) {
  StepCosts costs{1, 1, 1, 0};
  costs.lengths = {length_scale(8, 8, 0)};
  try {
    simulate(make_all_schedules(ScheduleKind::one_f_one_b, 2, 2, 1), costs);
    FAIL() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "simulate: F1 has no length among the 1 microbatches' lengths");
  }
}
