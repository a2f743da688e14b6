// The dry-run simulators (pipeline/simulate.h) against the closed forms: AFAB and 1F1B idle
// share (p-1)/(m+p-1), the interleaved bubble (p-1)(t_f+t_b)/v, the zero-bubble schedules'
// bubbles (p-1) max(t_f, t_f + t_i - k t_w) for ZB-H1 (k = 1) and ZB-H2 (k = 2), ZB-V's makespan
// (6m + p - 1) t at equal costs, and the peaks of slots and weight buffers; rendezvous sends,
// latency, deadlocks reported with the grid, and schedule errors. Every schedule the library
// makes must run without deadlock, whatever the costs. The transfer-stream model (the executor's
// two streams) by hand, and between the data flow and one step at a time. An overlapped pair's
// slot (sum or max of its two costs) and peak in the three simulators, and its timeline. Host code only; runs in
// both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/simulate.h"
#include "pipeline/zero_bubble.h"

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
    simulate(stages, {1, 1, 1, 0});
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Simulator, AfabAndOneFOneBIdleShareIsPMinusOneOverMPlusPMinusOne) {
  const StepCosts costs{1, 1, 1, 0};  // t_b = t_i + t_w = 2 t_f, zero latency
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
            simulate(make_all_schedules(ScheduleKind::interleaved, p, m, v), {t_f / v, t_b / 2 / v, t_b / 2 / v, 0});

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
      const Simulation simulation = simulate(make_all_schedules(ScheduleKind::one_f_one_b, p, m, 1), {1, 1, 1, 0});
      for (int s = 0; s < p; s++) EXPECT_EQ(simulation.stages[s].peak_in_flight, std::min(p - s, m));
    }
}

TEST(Simulator, AfabPeakInFlightIsM) {
  for (int p : {2, 4, 8})
    for (int m : {1, p, 2 * p, 4 * p, 3 * p + 1}) {
      const Simulation simulation = simulate(make_all_schedules(ScheduleKind::afab, p, m, 1), {1, 1, 1, 0});
      for (int s = 0; s < p; s++) EXPECT_EQ(simulation.stages[s].peak_in_flight, m);
    }
}

TEST(Simulator, EveryScheduleRunsWithoutDeadlock) {
  for (ScheduleKind kind : all_schedule_kinds())
    for (int p = 1; p <= 8; p++)
      for (int v = kind == ScheduleKind::zb_interleaved ? 2 : 1;
           v <= (kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_interleaved ? 4 : 1); v++)
        for (int m = 1; m <= 4 * p + 1; m++) {
          if (kind == ScheduleKind::interleaved && m % p != 0) continue;
          if (kind == ScheduleKind::zb_interleaved && m % std::max(1, m / p) != 0) continue;  // PyTorch's rounds
          if (kind == ScheduleKind::dual_pipe_v && m < 2 * p) continue;
          const std::vector<StageSchedule> stages = make_all_schedules(kind, p, m, v);
          const PlacementKind placement = placement_of(kind, p, v).kind;
          for (const StepCosts& costs : {StepCosts{1, 1, 1, 0}, StepCosts{1, 0.5, 0.5, 0.25}, StepCosts{1, 1.5, 1.5, 4},
                                         StepCosts{1, 3, 0.5, 0}, StepCosts{2, 1, 3, 0.5}})
            EXPECT_EQ(simulate(stages, costs, placement).deadlock, "")
                << schedule_name(kind) << " p " << p << " m " << m << " v " << v;
        }
}

// The zero-bubble schedules' bubble (makespan minus a stage's m (t_f + t_i + t_w), the same on
// every stage) for m >= p: ZB-H1's (p - 1)(t_f + t_i - t_w) of the paper's Table 2 where t_i >=
// t_w, and (p - 1) t_f, the last stage's wait for its first forward, where W costs more than I,
// so (p - 1) max(t_f, t_f + t_i - t_w); ZB-H2's, for m >= 2p - 1 (its warm-up's microbatches),
// (p - 1) max(t_f, t_f + t_i - 2 t_w): the paper's (p - 1)(t_f + t_i - 2 t_w) where t_i >= 2 t_w,
// and never below (p - 1) t_f, since a step here begins and ends on every stage together (the
// paper's zero needs its post-validation, which overlaps steps). In the data-flow model (transfers
// that hold no stage), and in the executor's (rendezvous groups on the compute stream) where the
// two agree: at equal costs, and for ZB-H1 wherever t_i >= t_w.
TEST(Simulator, ZeroBubbleBubblesAreTheClosedForms) {
  for (const StepCosts& c : {StepCosts{1, 1, 1, 0}, StepCosts{2, 2, 1, 0}, StepCosts{1, 3, 1, 0}, StepCosts{2, 3, 1, 0},
                             StepCosts{3, 1, 1, 0}, StepCosts{1, 1, 2, 0}, StepCosts{2, 5, 1, 0}, StepCosts{1, 2, 0.5, 0}})
    for (int p : {2, 4, 8})
      for (int m : {p, 2 * p - 1, 2 * p, 3 * p + 1, 4 * p})
        for (ScheduleKind kind : {ScheduleKind::zb_h1, ScheduleKind::zb_h2}) {
          const bool h1 = kind == ScheduleKind::zb_h1;
          if (!h1 && m < 2 * p - 1) continue;
          SCOPED_TRACE(schedule_name(kind) + " p " + std::to_string(p) + " m " + std::to_string(m) + " costs " +
                       std::to_string(c.forward) + " " + std::to_string(c.backward_input) + " " +
                       std::to_string(c.backward_weight));
          const std::vector<StageSchedule> stages = make_all_schedules(kind, p, m, 1);
          std::vector<std::vector<Action>> orders;
          for (const StageSchedule& steps : stages) orders.push_back(compute_actions(steps));
          const double k = h1 ? 1 : 2;
          const double bubble =
              (p - 1) * std::max(c.forward, c.forward + c.backward_input - k * c.backward_weight);
          const double busy = m * (c.forward + c.backward_input + c.backward_weight);
          const Simulation dataflow = simulate_dataflow(orders, c);
          ASSERT_EQ(dataflow.deadlock, "");
          EXPECT_NEAR(dataflow.makespan, busy + bubble, kExact);
          for (const StageSimulation& stage : dataflow.stages) EXPECT_NEAR(stage.busy, busy, kExact);
          const bool executor_agrees = (c.backward_input == c.backward_weight && c.forward == c.backward_input) ||
                                       (h1 && c.backward_input >= c.backward_weight);
          if (executor_agrees) {
            EXPECT_NEAR(simulate(stages, c).makespan, busy + bubble, kExact);
          }
        }
}

// 1F1B in the data-flow model: the same (p - 1)(t_f + t_b) as with rendezvous groups.
TEST(Simulator, OneFOneBBubbleIsTheSameWithTransfersBesideTheStream) {
  for (int p : {2, 4, 8})
    for (int m : {1, p, 3 * p + 1}) {
      std::vector<std::vector<Action>> orders;
      for (int s = 0; s < p; s++) orders.push_back(one_f_one_b_order(p, m, s));
      EXPECT_EQ(simulate_dataflow(orders, {1, 1, 1, 0}).makespan, 3.0 * (m + p - 1));
    }
}

// ZB-V at equal costs t of F, I and W per chunk, m >= 2p - 1 (docs/pipeline.md derives it): the
// makespan is (6m + p - 1) t, a bubble of (p - 1) t, a sixth of 1F1B's (p - 1) 6t on the same
// stages; every stage holds at most 2p chunk slots (p microbatches' worth, as 1F1B's stage 0)
// and stage s at most 2s + 1 weight buffers. The executor's rendezvous groups give the same
// makespan, and hold one slot more on the last stage, whose turn takes chunk 1's slot at chunk
// 0's forward.
TEST(Simulator, ZeroBubbleVMakespanAndPeaksAreTheDerivedOnes) {
  for (int p : {2, 4, 8})
    for (int m : {2 * p - 1, 2 * p, 3 * p + 1, 4 * p}) {
      const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::zb_v, p, m, 2);
      std::vector<std::vector<Action>> orders;
      for (const StageSchedule& steps : stages) orders.push_back(compute_actions(steps));
      const Simulation dataflow = simulate_dataflow(orders, {1, 1, 1, 0}, PlacementKind::v_shape);
      const Simulation executor = simulate(stages, {1, 1, 1, 0}, PlacementKind::v_shape);
      EXPECT_EQ(dataflow.makespan, 6.0 * m + p - 1) << "p " << p << " m " << m;
      EXPECT_EQ(executor.makespan, 6.0 * m + p - 1) << "p " << p << " m " << m;
      for (int s = 0; s < p; s++) {
        EXPECT_EQ(dataflow.stages[s].peak_in_flight, 2 * p) << "p " << p << " m " << m << " stage " << s;
        EXPECT_EQ(dataflow.stages[s].peak_pending, 2 * s + 1) << "p " << p << " m " << m << " stage " << s;
        EXPECT_EQ(executor.stages[s].peak_in_flight, 2 * p + (s == p - 1 ? 1 : 0));
      }
    }
}

// Fewer microbatches than ZB-V is built for: a bubble of max(p - 1, 2 (2p - 1 - m)) t, the
// missing microbatches' actions leaving their places in the order empty.
TEST(Simulator, ZeroBubbleVWithFewMicrobatchesLeavesTheirSlotsIdle) {
  for (int p : {2, 4, 8})
    for (int m = 1; m < 2 * p - 1; m++) {
      const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::zb_v, p, m, 2);
      const Simulation simulation = simulate(stages, {1, 1, 1, 0}, PlacementKind::v_shape);
      EXPECT_EQ(simulation.makespan - 6.0 * m, std::max(p - 1, 2 * (2 * p - 1 - m))) << "p " << p << " m " << m;
    }
}

// ZB-H1 holds 1F1B's slots, min(p - s, m) on stage s, and s + 1 weight buffers (m >= p); ZB-H2
// up to 2p - 1 slots on stage 0 (2 (p - s) - 1 on stage s) and 2s + 1 weight buffers (m >= 2p - 1).
TEST(Simulator, ZeroBubblePeaksAreTheDerivedOnes) {
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p}) {
      const Simulation h1 = simulate(make_all_schedules(ScheduleKind::zb_h1, p, m, 1), {1, 1, 1, 0});
      for (int s = 0; s < p; s++) {
        EXPECT_EQ(h1.stages[s].peak_in_flight, std::min(p - s, m));
        EXPECT_EQ(h1.stages[s].peak_pending, s + 1);
      }
      if (m < 2 * p - 1) continue;
      const Simulation h2 = simulate(make_all_schedules(ScheduleKind::zb_h2, p, m, 1), {1, 1, 1, 0});
      for (int s = 0; s < p; s++) {
        EXPECT_EQ(h2.stages[s].peak_in_flight, 2 * (p - s) - 1) << "p " << p << " m " << m << " stage " << s;
        EXPECT_EQ(h2.stages[s].peak_pending, 2 * s + 1) << "p " << p << " m " << m << " stage " << s;
      }
    }
}

TEST(Simulator, EachMessageAddsItsLatency) {
  // F0 on stage 0, message, F0 and B0 on stage 1, message, B0 on stage 0.
  const Simulation simulation = simulate(make_all_schedules(ScheduleKind::one_f_one_b, 2, 1, 1), {1, 1, 1, 0.5});

  EXPECT_EQ(simulation.makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  EXPECT_EQ(simulation.stages[0].busy, 3);
  EXPECT_NEAR(simulation.stages[1].idle_share, 1 - 3 / 7.0, kExact);
  std::vector<std::vector<Action>> orders = {one_f_one_b_order(2, 1, 0), one_f_one_b_order(2, 1, 1)};
  EXPECT_EQ(simulate_dataflow(orders, {1, 1, 1, 0.5}).makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  // A local hand-over is no message: ZB-V on one stage runs its 6 computes back to back.
  orders = {zb_v_order(1, 1, 0)};
  EXPECT_EQ(simulate_dataflow(orders, {1, 1, 1, 5}, PlacementKind::v_shape).makespan, 6);
  EXPECT_EQ(simulate(make_all_schedules(ScheduleKind::zb_v, 1, 1, 2), {1, 1, 1, 5}, PlacementKind::v_shape).makespan, 6);
}

// The executor's way, computes and groups on two streams: stage 0's F1 does not wait for sF0's
// group, and stage 0's receives are posted as soon as its stream is free. By hand, with F = 1,
// B = 2 and latency 0.5: stage 1 gets F0 at 1.5 and F1 at 2.5 (sF1 posted when F1 ends at 2),
// sends B0's gradient at 5.5 and B1's at 7.5; stage 0 runs B0 from 6 and B1 from 8 to 10. One
// step at a time, F1 waits for sF0 (until 1.5), and everything after it is half a latency later
// on each message: 11.
TEST(Simulator, TransferStreamRunsComputesPastTheirStagesGroups) {
  const std::vector<StageSchedule> stages =
      parse_stages({"F0 sF0 F1 sF1 rB0 B0 rB1 B1", "rF0 F0 rF1 F1 B0 sB0 B1 sB1"});
  const StepCosts costs{1, 1, 1, 0.5};
  const Simulation streamed = simulate_transfer_stream(stages, costs);

  EXPECT_EQ(simulate(stages, costs).makespan, 11);
  EXPECT_EQ(streamed.makespan, 10);
  EXPECT_EQ(streamed.start_time[0], (std::vector<double>{0, 1, 1, 2, 2.5, 6, 6, 8}));
  EXPECT_EQ(streamed.end_time[0], (std::vector<double>{1, 1.5, 2, 2.5, 6, 8, 8, 10}));
  EXPECT_EQ(streamed.start_time[1], (std::vector<double>{0, 1.5, 1.5, 2.5, 3.5, 5.5, 5.5, 7.5}));
  EXPECT_EQ(streamed.stages[0].busy, 6);
  EXPECT_NEAR(streamed.stages[1].idle_share, 1 - 6 / 10.0, kExact);
}

// Each model drops waits of the one after it (the data flow the transfer stream's rendezvous and
// order, the transfer stream the step-by-step order), so their makespans are ordered, for every
// schedule the library makes and any costs.
TEST(Simulator, TransferStreamLiesBetweenTheDataFlowAndOneStepAtATime) {
  for (ScheduleKind kind : all_schedule_kinds())
    for (int p : {1, 2, 3, 4, 6})
      for (int m : {p, 2 * p, 4 * p}) {
        if (kind == ScheduleKind::dual_pipe_v && m < 2 * p) continue;
        const bool interleaves = kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_interleaved;
        const int v = interleaves ? 2 : chunks_per_stage(kind, 1);
        const PipelineSchedule schedule = make_pipeline_schedule(kind, p, m, v);
        std::vector<std::vector<Action>> orders;
        for (const StageSchedule& steps : schedule.stages) orders.push_back(compute_actions(steps));
        for (const StepCosts& costs : {StepCosts{1, 1, 1, 0}, StepCosts{1, 1.5, 1.5, 4}, StepCosts{2, 1, 3, 0.5}}) {
          const PlacementKind placement = schedule.placement.kind;
          const double streamed = simulate_transfer_stream(schedule.stages, costs, placement).makespan;
          EXPECT_LE(simulate_dataflow(orders, costs, placement).makespan, streamed + kExact)
              << schedule_name(kind) << " p " << p << " m " << m;
          EXPECT_LE(streamed, simulate(schedule.stages, costs, placement).makespan + kExact)
              << schedule_name(kind) << " p " << p << " m " << m;
        }
      }
}

// In 1F1B every group but the first and last sits between the compute producing its send and the
// compute using its receive (F3 sF3+rB1 B1): the transfer stream has nothing to overlap, at any
// latency.
TEST(Simulator, OneFOneBGainsNothingFromTheTransferStream) {
  for (int p : {2, 4, 8})
    for (int m : {1, p, 3 * p + 1})
      for (const StepCosts& costs : {StepCosts{1, 1, 1, 0.5}, StepCosts{1, 2, 0, 3}}) {
        const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::one_f_one_b, p, m, 1);
        EXPECT_EQ(simulate_transfer_stream(stages, costs).makespan, simulate(stages, costs).makespan)
            << "p " << p << " m " << m;
      }
}

TEST(Simulator, TwoStageCrossingDeadlocksUnlessGrouped) {
  // Stage 0 sends F1's output while stage 1 sends B0's gradient: each send waits for a
  // receive the other stage posts only after its own send.
  const Simulation crossing = simulate(
      parse_stages({"F0 sF0 F1 sF1 rB0 B0 rB1 B1", "rF0 F0 B0 sB0 rF1 F1 B1 sB1"}), {1, 1, 1, 0});
  const Simulation grouped = simulate(
      parse_stages({"F0 sF0 F1 sF1+rB0 B0 rB1 B1", "rF0 F0 B0 sB0+rF1 F1 B1 sB1"}), {1, 1, 1, 0});

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
      simulate(parse_stages({"F0 sF0 rB0 B0", "rB0 rF0 F0 sF0 B0 sB0", "rF0 F0 B0 sB0"}), {1, 1, 1, 0});

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
  const Simulation simulation = simulate(parse_stages({"F0 sF0 rB0 B0", "rF0 F0 rF1 B0 sB0"}), {1, 1, 1, 0});

  EXPECT_NE(simulation.deadlock.find("stage 1 is stuck at step 2 (rF1): it waits for the activation of microbatch 1 "
                                     "from stage 0 chunk 0 to stage 1 chunk 0; no stage sends it\n"),
            std::string::npos)
      << simulation.deadlock;
}

TEST(Simulator, SplitBackwardsAreCheckedLikeTheOthers) {
  EXPECT_NE(error_of(parse_stages({"F0 W0 I0"})).find("step 1 runs W0 before its I0"), std::string::npos);
  EXPECT_NE(error_of(parse_stages({"F0 I0 W0 W0"})).find("step 3 repeats W0"), std::string::npos);
  EXPECT_NE(error_of(parse_stages({"F0 I0 B0 W0"})).find("step 2 runs both B and I of B0"), std::string::npos);
  // A V placement of two stages: chunk 0's output goes down to stage 1, chunk 1's back up.
  EXPECT_EQ(simulate(parse_stages({"F0 sF0 rF0.1 F0.1 I0.1 sB0.1 W0.1 rB0 I0 W0",
                                   "rF0 F0 F0.1 sF0.1 rB0.1 I0.1 I0 sB0 W0.1 W0"}),
                     {1, 1, 1, 0}, PlacementKind::v_shape)
                .deadlock,
            "");
  EXPECT_NE(error_of(parse_stages({"F0 sF0 B0", "rF0 F0 sF0 B0 sB0"})).find("no other stage is at that end"),
            std::string::npos);
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
  const StepCosts costs{1, 1, 1, 0};

  EXPECT_EQ(format_timeline(stages, simulate(stages, costs), costs),
            "stage 0 | F0 F1 .  .  B0 -- .  B1 --\n"
            "stage 1 | .  F0 B0 -- F1 B1 -- .  .\n");
}

// One stage of a V (p = 1: the turn is local, no messages) with one pair, F1 with B0.1. At t_f = 1
// and a B of 2 the pair's slot is 3 (sum) or 2 (max); both computes start at 2 and end together.
// The peak counts both computes' slots at once: F1 takes chunk 0's and hands chunk 1's over (4
// held) before B0.1 gives one back; in the data flow, which counts from each forward, F0, F0.1 and
// F1 (3).
TEST(Simulator, AnOverlappedPairIsOneSlotOfTwoComputes) {
  const std::vector<StageSchedule> stages = parse_stages({"F0 F0.1 F1&B0.1 F1.1 B1.1 B0 B1"});
  const std::vector<std::vector<Action>> compute = {compute_actions(stages[0])};
  ASSERT_TRUE(stages[0][3][0].overlapped);
  for (PairCost pair : {PairCost::sum, PairCost::max}) {
    const StepCosts costs{1, 1, 1, 0, pair};
    const double slot = pair == PairCost::sum ? 3 : 2;
    for (const Simulation& run : {simulate(stages, costs, PlacementKind::v_shape),
                                  simulate_transfer_stream(stages, costs, PlacementKind::v_shape),
                                  simulate_dataflow(compute, costs, PlacementKind::v_shape)}) {
      EXPECT_NEAR(run.start_time[0][2], 2, kExact);
      EXPECT_NEAR(run.start_time[0][3], 2, kExact);
      EXPECT_NEAR(run.end_time[0][2], 2 + slot, kExact);
      EXPECT_NEAR(run.end_time[0][3], 2 + slot, kExact);
      EXPECT_NEAR(run.makespan, 9 + slot, kExact);
      EXPECT_NEAR(run.stages[0].busy, 9 + slot, kExact);
    }
  }
  EXPECT_EQ(simulate(stages, {1, 1, 1, 0}, PlacementKind::v_shape).stages[0].peak_in_flight, 4);
  EXPECT_EQ(simulate_dataflow(compute, {1, 1, 1, 0}, PlacementKind::v_shape).stages[0].peak_in_flight, 3);
  const StepCosts costs{1, 1, 1, 0};
  EXPECT_EQ(format_timeline(stages, simulate(stages, costs, PlacementKind::v_shape), costs),
            "stage 0 | F0    F0.1  F1    &B0.1 ----- F1.1  B1.1  ----- B0    ----- B1    -----\n");
}
