// Drains of PipeDream's asynchronous pipeline (pipeline/pipedream.h): the run cut after a step for a
// checkpoint (--save-every, a stop signal). A drained step ends with nothing in flight and every
// update applied on every stage, the next step warms up again, the lists still run without
// deadlock, a drain costs one flush, and the drain a stop signal chooses leaves every step already run as it was, and is the
// earliest that does. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "pipeline/pipedream.h"
#include "pipeline/simulate.h"
#include "tests/error_message.h"

namespace {

const PipeDreamRule kStashing{1, true, false}, kNoStashing{1, false, false}, kVerticalSync{1, true, true},
    kEveryTwo{2, true, false};

std::string rule_text(const PipeDreamRule& rule, int p, int m) {
  return "K=" + std::to_string(rule.update_every) + (rule.weight_stashing ? "" : " no stashing") +
         (rule.vertical_sync ? " vertical sync" : "") + " p=" + std::to_string(p) + " m=" + std::to_string(m);
}

// After a drain at step d, on every stage: each microbatch before d m has had its forward and its
// backward by the end of step d, none after has begun, the stage has applied every update through
// d m / K, and microbatch d m's forward uses that version (the warm-up starts again).
TEST(PipeDreamDrain, ADrainedStepEndsWithNothingInFlightAndEveryUpdateApplied) {
  for (const PipeDreamRule& rule : {kStashing, kNoStashing, kVerticalSync, kEveryTwo})
    for (int p : {1, 2, 4, 8})
      for (int m : {2, 4, 8}) {
        if (m % rule.update_every != 0) continue;
        const int steps = 5, d = 2, K = rule.update_every;
        for (int s = 0; s < p; ++s) {
          const auto by_step = pipedream_steps(rule, p, m, steps, s, {d});
          std::set<int> forwards, backwards;
          int applied = 0;
          for (int t = 0; t < d; ++t)
            for (const PipeDreamAction& a : by_step[t]) {
              if (a.kind == PipeDreamKind::forward) forwards.insert(a.microbatch);
              if (a.kind == PipeDreamKind::backward) backwards.insert(a.microbatch);
              if (a.kind == PipeDreamKind::update) applied = a.version;
            }
          std::set<int> before_drain;
          for (int k = 0; k < d * m; ++k) before_drain.insert(k);
          EXPECT_EQ(forwards, before_drain) << rule_text(rule, p, m) << " stage " << s;
          EXPECT_EQ(backwards, before_drain) << rule_text(rule, p, m) << " stage " << s;
          EXPECT_EQ(applied, d * m / K) << rule_text(rule, p, m) << " stage " << s;
          const PipeDreamAction& first = by_step[d].front();
          EXPECT_EQ(to_text(first), "F" + std::to_string(d * m) + "@" + std::to_string(d * m / K))
              << rule_text(rule, p, m) << " stage " << s;
        }
        EXPECT_EQ(simulate(pipedream_run_schedules(p, m, steps, {d}), {1, 1, 1, 0}).deadlock, "")
            << rule_text(rule, p, m);
      }
}

// What a drain costs: the simulated run (F = 1, B = 2, rendezvous messages) is longer by one flush
// per drain, the cool-down and the warm-up again: (p - 1)(t_f + t_b), a synchronous 1F1B step's
// bubble, once per drain instead of once per step.
TEST(PipeDreamDrain, ADrainCostsOneFlush) {
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p}) {
      const StepCosts costs{1, 1, 1, 0};
      const double plain = simulate(pipedream_run_schedules(p, m, 6), costs).makespan;
      const double one = simulate(pipedream_run_schedules(p, m, 6, {3}), costs).makespan;
      const double two = simulate(pipedream_run_schedules(p, m, 6, {2, 4}), costs).makespan;
      EXPECT_EQ(one - plain, 3.0 * (p - 1)) << "p=" << p << " m=" << m;
      EXPECT_EQ(two - plain, 2 * 3.0 * (p - 1)) << "p=" << p << " m=" << m;
    }
}

// The steps after a drain are a new run's, microbatches numbered on: the same lists as the first
// steps of a run that starts there, each microbatch d m later.
TEST(PipeDreamDrain, TheStepsAfterADrainAreANewRunsFromThere) {
  for (int p : {2, 4})
    for (int m : {1, 4}) {
      const int steps = 5, d = 3;
      const auto drained = pipedream_step_schedules(p, m, steps, {d});
      const auto fresh = pipedream_step_schedules(p, m, steps - d);
      for (int t = 0; t < steps - d; ++t)
        for (int s = 0; s < p; ++s) {
          StageSchedule shifted = fresh[t][s];
          for (Step& step : shifted)
            for (Action& a : step) a.microbatch += d * m;
          EXPECT_EQ(to_text(drained[d + t][s]), to_text(shifted)) << "p=" << p << " m=" << m << " step " << d + t + 1;
        }
    }
}

// A stop signal after step `done`: the drain pipedream_stop_drain chooses keeps every step already
// run (lists, order and which updates are decided at the part's end) and needs no more weight
// versions or gradients than the run without it; the step before it (when after done) would not.
TEST(PipeDreamDrain, AStopDrainLeavesTheStepsRunAsTheyWereAndIsTheEarliest) {
  const auto same_through = [](const PipeDreamRule& rule, int p, int m, int steps, const std::vector<int>& drains,
                               int done) {
    const auto before = pipedream_step_schedules(p, m, steps), after = pipedream_step_schedules(p, m, steps, drains);
    for (int s = 0; s < p; ++s) {
      const auto order_before = pipedream_steps(rule, p, m, steps, s);
      const auto order_after = pipedream_steps(rule, p, m, steps, s, drains);
      for (int t = 0; t < done; ++t)
        if (to_text(before[t][s]) != to_text(after[t][s]) || order_before[t] != order_after[t]) return false;
    }
    for (int v = 1; v <= done * m / rule.update_every; ++v)
      if (pipedream_decided_at_end(rule, p, m, steps, v) != pipedream_decided_at_end(rule, p, m, steps, v, drains))
        return false;
    return true;
  };
  for (const PipeDreamRule& rule : {kStashing, kNoStashing, kVerticalSync, kEveryTwo})
    for (int p = 1; p <= 8; ++p)
      for (int m : {1, 2, 3, 4, 6, 8}) {
        if (m % rule.update_every != 0) continue;
        const int steps = 4 + 8 / m;
        for (int done = 1; done < steps; ++done) {
          const int d = pipedream_stop_drain(rule, p, m, steps, {}, done);
          const std::string where = rule_text(rule, p, m) + " done " + std::to_string(done);
          ASSERT_GE(d, done) << where;
          ASSERT_LE(d, steps) << where;
          if (d == steps) continue;  // the run's end drains anyway
          EXPECT_TRUE(same_through(rule, p, m, steps, {d}, done)) << where << ": drain after " << d;
          if (d > done) {
            EXPECT_FALSE(same_through(rule, p, m, steps, {d - 1}, done)) << where << ": drain after " << d - 1;
          }
          for (int s = 0; s < p; ++s) {
            EXPECT_LE(pipedream_versions_kept(rule, p, m, steps, s, {d}), pipedream_versions_kept(rule, p, m, steps, s));
            EXPECT_LE(pipedream_gradients_kept(rule, p, m, steps, s, {d}), pipedream_gradients_kept(rule, p, m, steps, s));
          }
        }
      }
}

// --save-every N's (and --val-every's, --sample-every's) drains: the steps of the whole run that are
// multiples of N, counted from a resumed run's first; the stop drain takes a drain already there.
TEST(PipeDreamDrain, SaveEveryDrainsAtItsMultiplesAndAStopTakesTheNextOne) {
  EXPECT_EQ(pipedream_drains_every({2}, 0, 7), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(pipedream_drains_every({2}, 0, 6), (std::vector<int>{2, 4}));  // the run's end drains anyway
  EXPECT_EQ(pipedream_drains_every({3}, 2, 8), (std::vector<int>{1, 4, 7}));  // steps 3, 6, 9 of the whole
  EXPECT_EQ(pipedream_drains_every({0}, 0, 8), (std::vector<int>{}));
  // --save-every 4, --val-every 6, no samples: the multiples of either, once each, in order.
  EXPECT_EQ(pipedream_drains_every({4, 6, 0}, 0, 13), (std::vector<int>{4, 6, 8, 12}));
  EXPECT_EQ(pipedream_stop_drain(kStashing, 4, 4, 12, {}, 4), 5);
  EXPECT_EQ(pipedream_stop_drain(kStashing, 4, 4, 12, {4, 8}, 4), 4);
  EXPECT_EQ(pipedream_stop_drain(kStashing, 1, 4, 12, {}, 4), 4);  // nothing in flight on one stage
  EXPECT_EQ(pipedream_stop_drain(kVerticalSync, 1, 4, 12, {}, 4), 5);  // the step's last update waits for its use
  EXPECT_EQ(pipedream_stop_drain(kStashing, 8, 2, 12, {}, 4), 8);  // 4 x 2 + 7 microbatches to hold
}

TEST(PipeDreamDrain, BadDrainsAreRefusedInOneLine) {
  EXPECT_EQ(error_of([] { check_pipedream_drains(4, {4}); }),
            "pipedream: a drain after step 4 of a run of 4 steps: drains go in order, after a step before the last");
  EXPECT_EQ(error_of([] { check_pipedream_drains(4, {2, 2}); }),
            "pipedream: a drain after step 2 of a run of 4 steps: drains go in order, after a step before the last");
  EXPECT_EQ(error_of([] { check_pipedream_drains(4, {1, 3}); }), "(no error)");
}

}  // namespace
