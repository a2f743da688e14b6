// The controllable-memory V schedules (pipeline/controllable_memory.h): every order is a valid
// grid (each compute once, each chunk's F's, I's and W's in microbatch order, no deadlock), each
// stage's activations, counted from the grid as the executor holds them, stay within v-half's
// (p + 2) / 2 and v-min's (p + 4) / 3 stages' worth for every p and m, and the idle share at
// p = 4, m = 8 is no worse than the paper's generator's. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/controllable_memory.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_file.h"
#include "pipeline/simulate.h"
#include "tests/error_message.h"

namespace {

// Idle shares are ratios of small integers, exact to about 1e-16.
constexpr double kExact = 1e-12;

const ScheduleKind kKinds[] = {ScheduleKind::v_half, ScheduleKind::v_min};

// The paper's caps in stages' worth: one microbatch through a whole stage, both chunks.
int stages_worth_cap(ScheduleKind kind, int p) { return kind == ScheduleKind::v_half ? (p + 2) / 2 : (p + 4) / 3; }

// Every m a stage count meets: fewer microbatches than stages, as many, one more, 2p - 1, 2p, 3p + 1.
std::vector<int> microbatch_counts(int p) {
  std::vector<int> counts = {1, p, p + 1, 2 * p - 1, 2 * p, 3 * p + 1};
  if (p > 2) counts.push_back(p - 1);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Half-stages (chunk activations) the stage holds at its peak, walking its compute grid: a
// (microbatch, chunk) is held from its input's arrival until its W, the slot until I and the
// weight-gradient inputs after it (pipeline/execute.h). On the last stage chunk 0's forward hands
// over into chunk 1's slot, so both are taken there.
int peak_half_stages(const std::vector<Action>& order, bool last_stage) {
  int held = 0, peak = 0;
  for (const Action& a : order) {
    if (a.kind == ActionKind::forward && a.chunk == 0) held += last_stage ? 2 : 1;
    if (a.kind == ActionKind::forward && a.chunk == 1 && !last_stage) held += 1;
    if (a.kind == ActionKind::backward_weight) held -= 1;
    peak = std::max(peak, held);
  }
  return peak;
}

}  // namespace

// schedule_from_grid checks what a schedule file must satisfy: every microbatch's F, I and W once
// per chunk in that order, each chunk's F's and W's in microbatch order (so the gradients add up
// in every schedule's order), inputs that come, and no deadlock once lowered.
TEST(ControllableMemory, EveryOrderIsAValidGrid) {
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 8; p++)
      for (int m : microbatch_counts(p)) {
        const ScheduleGrid grid{PlacementKind::v_shape, controllable_memory_orders(kind, p, m)};
        EXPECT_EQ(error_of([&] { schedule_from_grid(grid, p, m); }), "(no error)")
            << schedule_name(kind) << " p " << p << " m " << m;
      }
}

TEST(ControllableMemory, PeakActivationsStayWithinTheCapOnEveryStage) {
  for (ScheduleKind kind : kKinds)
    for (int p = 2; p <= 8; p++)
      for (int m : microbatch_counts(p)) {
        const std::vector<StageSchedule> stages = make_all_schedules(kind, p, m, 2);
        for (int s = 0; s < p; s++)
          EXPECT_LE(peak_half_stages(compute_actions(stages[s]), s == p - 1), 2 * stages_worth_cap(kind, p))
              << schedule_name(kind) << " p " << p << " m " << m << " stage " << s << ": "
              << to_text(stages[s]);
      }
}

// The sail-sg generator (zbv_greedy.py, the paper's code) at p = 4, m = 8, costs F = I = W: its
// step spans 53 slots for v-half (idle 5/53 = 0.094) and 59 for v-min (11/59 = 0.186), for 48
// slots of work per stage. Ours, in the executor's model (rendezvous groups) and the data flow's,
// on every stage.
TEST(ControllableMemory, IdleShareAtFourStagesIsNoWorseThanThePapersGenerator) {
  for (ScheduleKind kind : kKinds) {
    const double reference = kind == ScheduleKind::v_half ? 5.0 / 53 : 11.0 / 59;
    const PipelineSchedule schedule = make_pipeline_schedule(kind, 4, 8, 2);
    std::vector<std::vector<Action>> orders;
    for (const StageSchedule& steps : schedule.stages) orders.push_back(compute_actions(steps));
    const Simulation executor = simulate(schedule.stages, {1, 1, 1, 0}, PlacementKind::v_shape);
    const Simulation dataflow = simulate_dataflow(orders, {1, 1, 1, 0}, PlacementKind::v_shape);
    ASSERT_EQ(executor.deadlock, "");
    for (int s = 0; s < 4; s++) {
      EXPECT_LE(executor.stages[s].idle_share, reference + kExact) << schedule_name(kind) << " stage " << s;
      EXPECT_LE(dataflow.stages[s].idle_share, reference + kExact) << schedule_name(kind) << " stage " << s;
    }
  }
}

TEST(ControllableMemory, RunsWithoutDeadlockWhateverTheCosts) {
  for (ScheduleKind kind : kKinds)
    for (int p = 1; p <= 8; p++)
      for (int m : microbatch_counts(p)) {
        const std::vector<StageSchedule> stages = make_all_schedules(kind, p, m, 2);
        for (const StepCosts& costs : {StepCosts{1, 1, 1, 0}, StepCosts{1, 3, 0.5, 0}, StepCosts{2, 1, 3, 0.5}})
          EXPECT_EQ(simulate(stages, costs, PlacementKind::v_shape).deadlock, "")
              << schedule_name(kind) << " p " << p << " m " << m;
      }
}

TEST(ControllableMemory, ConfigurationErrorsSayWhatToChange) {
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::v_half, 4, 0, 2, 0); }), "--microbatches 0 must be at least 1");
  EXPECT_EQ(error_of([] { controllable_memory_orders(ScheduleKind::v_min, 0, 4); }), "--pp 0 must be at least 1");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::v_min, 4, 8, 3, 0); }),
            "--virtual-stages 3 needs --schedule interleaved (v-min runs two chunks per stage)");
  EXPECT_EQ(parse_schedule_kind("v-half"), ScheduleKind::v_half);
  EXPECT_EQ(parse_schedule_kind("v-min"), ScheduleKind::v_min);
  EXPECT_EQ(placement_of(ScheduleKind::v_half, 4, 1).kind, PlacementKind::v_shape);
  EXPECT_TRUE(splits_backward(ScheduleKind::v_min));
}
