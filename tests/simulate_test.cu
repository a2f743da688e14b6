// The dry-run simulator (pipeline/simulate.h) against the closed forms: AFAB and 1F1B idle
// share (p-1)/(m+p-1), the interleaved bubble (p-1)(t_f+t_b)/v, peak in-flight microbatches;
// rendezvous sends, latency, deadlocks reported with the grid, and schedule errors. Every
// schedule the library makes must run without deadlock. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/simulate.h"

namespace {

// Times below are small integers or sums of dyadic fractions, exact in double; the only
// rounding is in idle_share's division, about 1e-16 relative.
constexpr double kExact = 1e-12;

std::vector<StageSchedule> parse_stages(const std::vector<std::string>& rows) {
  std::vector<StageSchedule> stages;
  for (const std::string& row : rows) stages.push_back(parse_schedule(row));
  return stages;
}

std::string error_of(const std::vector<StageSchedule>& stages) {
  try {
    simulate(stages, {1, 2, 0});
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Simulator, AfabAndOneFOneBIdleShareIsPMinusOneOverMPlusPMinusOne) {
  const StepCosts costs{1, 2, 0};  // t_b = 2 t_f, zero latency
  for (ScheduleKind kind : {ScheduleKind::afab, ScheduleKind::one_f_one_b})
    for (int p : {2, 4, 8})
      for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1}) {
        const Simulation simulation = simulate(make_all_schedules(kind, p, m, 1), costs);

        ASSERT_EQ(simulation.deadlock, "");
        const double expected = static_cast<double>(p - 1) / (m + p - 1);
        for (int s = 0; s < p; s++)
          EXPECT_NEAR(simulation.stages[s].idle_share, expected, kExact)
              << schedule_name(kind) << " p " << p << " m " << m << " stage " << s;
        EXPECT_EQ(simulation.makespan, 3.0 * (m + p - 1));
      }
}

TEST(Simulator, InterleavedBubbleIsPMinusOneTimesStageStepOverV) {
  // A whole stage's forward takes 12 and its backward 24, so a chunk's takes 12/v and 24/v,
  // exact for v in {2, 3, 4}.
  const double t_f = 12, t_b = 24;
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p})
      for (int v : {2, 3, 4}) {
        const Simulation simulation =
            simulate(make_all_schedules(ScheduleKind::interleaved, p, m, v), {t_f / v, t_b / v, 0});

        ASSERT_EQ(simulation.deadlock, "");
        for (int s = 0; s < p; s++) {
          EXPECT_NEAR(simulation.stages[s].busy, m * (t_f + t_b), kExact);
          EXPECT_NEAR(simulation.makespan - simulation.stages[s].busy, (p - 1) * (t_f + t_b) / v, kExact)
              << "p " << p << " m " << m << " v " << v << " stage " << s;
        }
      }
}

TEST(Simulator, OneFOneBPeakInFlightIsMinOfPMinusSAndM) {
  for (int p : {2, 4, 8})
    for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1}) {
      const Simulation simulation = simulate(make_all_schedules(ScheduleKind::one_f_one_b, p, m, 1), {1, 2, 0});
      for (int s = 0; s < p; s++) EXPECT_EQ(simulation.stages[s].peak_in_flight, std::min(p - s, m));
    }
}

TEST(Simulator, AfabPeakInFlightIsM) {
  for (int p : {2, 4, 8})
    for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1}) {
      const Simulation simulation = simulate(make_all_schedules(ScheduleKind::afab, p, m, 1), {1, 2, 0});
      for (int s = 0; s < p; s++) EXPECT_EQ(simulation.stages[s].peak_in_flight, m);
    }
}

TEST(Simulator, EveryScheduleRunsWithoutDeadlock) {
  for (ScheduleKind kind : {ScheduleKind::afab, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int p = 1; p <= 8; p++)
      for (int v = 1; v <= (kind == ScheduleKind::interleaved ? 4 : 1); v++)
        for (int m = 1; m <= 4 * p + 1; m++) {
          if (kind == ScheduleKind::interleaved && m % p != 0) continue;
          const std::vector<StageSchedule> stages = make_all_schedules(kind, p, m, v);
          for (const StepCosts& costs : {StepCosts{1, 2, 0}, StepCosts{1, 1, 0.25}, StepCosts{1, 3, 4}})
            EXPECT_EQ(simulate(stages, costs).deadlock, "")
                << schedule_name(kind) << " p " << p << " m " << m << " v " << v;
        }
}

TEST(Simulator, EachMessageAddsItsLatency) {
  // F0 on stage 0, message, F0 and B0 on stage 1, message, B0 on stage 0.
  const Simulation simulation = simulate(make_all_schedules(ScheduleKind::one_f_one_b, 2, 1, 1), {1, 2, 0.5});

  EXPECT_EQ(simulation.makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  EXPECT_EQ(simulation.stages[0].busy, 3);
  EXPECT_NEAR(simulation.stages[1].idle_share, 1 - 3 / 7.0, kExact);
}

TEST(Simulator, TwoStageCrossingDeadlocksUnlessGrouped) {
  // Stage 0 sends F1's output while stage 1 sends B0's gradient: each send waits for a
  // receive the other stage posts only after its own send.
  const Simulation crossing = simulate(
      parse_stages({"F0 sF0 F1 sF1 rB0 B0 rB1 B1", "rF0 F0 B0 sB0 rF1 F1 B1 sB1"}), {1, 2, 0});
  const Simulation grouped = simulate(
      parse_stages({"F0 sF0 F1 sF1+rB0 B0 rB1 B1", "rF0 F0 B0 sB0+rF1 F1 B1 sB1"}), {1, 2, 0});

  EXPECT_EQ(crossing.deadlock,
            "deadlock:\n"
            "stage 0 is stuck at step 3 (sF1): it sends the activation of microbatch 1 from stage 0 chunk 0 to stage 1 "
            "chunk 0; stage 1 posts it only at its step 4 (rF1), after its own stuck step 3 (sB0)\n"
            "stage 1 is stuck at step 3 (sB0): it sends the gradient of microbatch 0 from stage 1 chunk 0 to stage 0 "
            "chunk 0; stage 0 posts it only at its step 4 (rB0), after its own stuck step 3 (sF1)\n"
            "stage 0 | F0    sF0   F1    >sF1< rB0   B0    rB1   B1\n"
            "stage 1 | rF0   F0    B0    >sB0< rF1   F1    B1    sB1\n");
  EXPECT_EQ(grouped.deadlock, "");
}

TEST(Simulator, MisorderedScheduleIsReportedAsDeadlockWithTheGrid) {
  // Stage 1 waits for B0's gradient before it has forwarded microbatch 0.
  const Simulation simulation =
      simulate(parse_stages({"F0 sF0 rB0 B0", "rB0 rF0 F0 sF0 B0 sB0", "rF0 F0 B0 sB0"}), {1, 2, 0});

  EXPECT_NE(simulation.deadlock.find(
                "stage 1 is stuck at step 0 (rB0): it waits for the gradient of microbatch 0 from stage 2 chunk 0 to "
                "stage 1 chunk 0; stage 2 posts it only at its step 3 (sB0), after its own stuck step 0 (rF0)\n"),
            std::string::npos)
      << simulation.deadlock;
  EXPECT_NE(simulation.deadlock.find("stage 0 | F0    >sF0< rB0   B0\n"
                                     "stage 1 | >rB0< rF0   F0    sF0   B0    sB0\n"
                                     "stage 2 | >rF0< F0    B0    sB0\n"),
            std::string::npos)
      << simulation.deadlock;
}

TEST(Simulator, ReceiveThatNoStageSendsIsNamed) {
  const Simulation simulation = simulate(parse_stages({"F0 sF0 rB0 B0", "rF0 F0 rF1 B0 sB0"}), {1, 2, 0});

  EXPECT_NE(simulation.deadlock.find("stage 1 is stuck at step 2 (rF1): it waits for the activation of microbatch 1 "
                                     "from stage 0 chunk 0 to stage 1 chunk 0; no stage sends it\n"),
            std::string::npos)
      << simulation.deadlock;
}

TEST(Simulator, BrokenDataFlowIsAnErrorWithTheStepMarked) {
  EXPECT_EQ(error_of(parse_stages({"F0 sF0 B0 rB0", "rF0 F0 B0 sB0"})),
            "schedule error: stage 0 step 2 runs B0 before receiving its output gradient\n"
            "stage 0 | F0   sF0  >B0< rB0\n"
            "stage 1 | rF0  F0   B0   sB0\n");
  EXPECT_NE(error_of(parse_stages({"F0 B1"})).find("runs B1 before its forward"), std::string::npos);
  EXPECT_NE(error_of(parse_stages({"sF0 F0 rB0 B0", "rF0 F0 B0 sB0"})).find("sends sF0's output before computing it"),
            std::string::npos);
  EXPECT_NE(error_of(parse_stages({"F0 F0 B0"})).find("repeats F0"), std::string::npos);
}

TEST(Simulator, SendMatchedWithAReceiveOfAnotherTensorIsAnError) {
  // NCCL has no tags: stage 1's first receive from stage 0 gets stage 0's first send.
  EXPECT_EQ(error_of(parse_stages({"F0 F1 sF1 sF0 rB0 B0 rB1 B1", "rF0 F0 B0 sB0 rF1 F1 B1 sB1"})),
            "schedule error: stage 1 step 0 receives the activation of microbatch 0 from stage 0 chunk 0 to stage 1 "
            "chunk 0, but the matching send of stage 0 (step 2) carries the activation of microbatch 1 from stage 0 "
            "chunk 0 to stage 1 chunk 0\n"
            "stage 0 | F0    F1    sF1   sF0   rB0   B0    rB1   B1\n"
            "stage 1 | >rF0< F0    B0    sB0   rF1   F1    B1    sB1\n");
}

TEST(Simulator, TimelinePlacesComputeAtItsSimulatedTime) {
  // Stage 1's B0 ends at 4, when both combined steps match; stage 0's B1 waits for stage 1's
  // B1 (5 to 7).
  const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::one_f_one_b, 2, 2, 1);
  const StepCosts costs{1, 2, 0};

  EXPECT_EQ(format_timeline(stages, simulate(stages, costs), costs),
            "stage 0 | F0 F1 .  .  B0 -- .  B1 --\n"
            "stage 1 | .  F0 B0 -- F1 B1 -- .  .\n");
}
