// PipeDream's asynchronous pipeline as data (pipeline/pipedream.h): each stage's order and weight
// versions against orders derived by hand (p = 2, 4; K = 1, 2; with and without stashing and with
// vertical sync), the versions against the updates the order runs before each action, the versions
// each stage keeps, the lowering's sends and receives matched within every step, the simulator's
// steady state without idle, and the configuration errors. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/pipedream.h"
#include "pipeline/simulate.h"
#include "tests/error_message.h"

namespace {

std::vector<std::string> step_texts(const PipeDreamRule& rule, int p, int m, int steps, int stage) {
  std::vector<std::string> texts;
  for (const auto& step : pipedream_steps(rule, p, m, steps, stage)) texts.push_back(to_text(step));
  return texts;
}

std::vector<int> versions_kept(const PipeDreamRule& rule, int p, int m, int steps) {
  std::vector<int> kept;
  for (int s = 0; s < p; s++) kept.push_back(pipedream_versions_kept(rule, p, m, steps, s));
  return kept;
}

const PipeDreamRule kStashing{1, true, false};
const PipeDreamRule kNoStashing{1, false, false};
const PipeDreamRule kVerticalSync{1, true, true};

}  // namespace

// Stage 0 of 2 holds two microbatches: F(k) runs after B(k - 2), so after k - 1 updates.
TEST(PipeDream, TwoStagesWithStashingMatchHandDerivedOrder) {
  EXPECT_EQ(step_texts(kStashing, 2, 2, 2, 0),
            (std::vector<std::string>{"F0@0 F1@0 B0@0 U1 F2@1 B1@0 U2", "F3@2 B2@1 U3 B3@2 U4"}));
  EXPECT_EQ(step_texts(kStashing, 2, 2, 2, 1),
            (std::vector<std::string>{"F0@0 B0@0 U1 F1@1 B1@1 U2", "F2@2 B2@2 U3 F3@3 B3@3 U4"}));
}

// Without stashing a backward takes the latest weights: B(k) after k updates.
TEST(PipeDream, WithoutStashingBackwardUsesLatestVersion) {
  EXPECT_EQ(step_texts(kNoStashing, 2, 2, 2, 0),
            (std::vector<std::string>{"F0@0 F1@0 B0@0 U1 F2@1 B1@1 U2", "F3@2 B2@2 U3 B3@3 U4"}));
}

// Vertical sync: the last stage uses for microbatch k the version stage 0's forward of k used, and
// applies update v just before its first use of v (U1 before F2, U2 before F3); stage 0's first use
// of v follows the backward completing it. U3 and U4, which no forward uses, wait for the run's end.
TEST(PipeDream, VerticalSyncUsesStageZerosVersion) {
  EXPECT_EQ(step_texts(kVerticalSync, 2, 2, 2, 1),
            (std::vector<std::string>{"F0@0 B0@0 F1@0 B1@0", "U1 F2@1 B2@1 U2 F3@2 B3@2 U3 U4"}));
  EXPECT_EQ(step_texts(kVerticalSync, 2, 2, 2, 0),
            (std::vector<std::string>{"F0@0 F1@0 B0@0 U1 F2@1 B1@0 U2", "F3@2 B2@1 B3@2 U3 U4"}));
}

// K = 2: an update after every second backward, so F(k) on stage 0 uses floor(max(0, k - p + 1) / 2),
// and each step ends with the update of its last B.
TEST(PipeDream, UpdatingEverySecondBackwardMatchesHandDerivedOrders) {
  const PipeDreamRule rule{2, true, false};
  EXPECT_EQ(step_texts(rule, 2, 2, 2, 0), (std::vector<std::string>{"F0@0 F1@0 B0@0 F2@0 B1@0 U1", "F3@1 B2@0 B3@1 U2"}));
  EXPECT_EQ(step_texts(rule, 2, 2, 2, 1),
            (std::vector<std::string>{"F0@0 B0@0 F1@0 B1@0 U1", "F2@1 B2@1 F3@1 B3@1 U2"}));
  EXPECT_EQ(step_texts(rule, 4, 4, 2, 0),
            (std::vector<std::string>{"F0@0 F1@0 F2@0 F3@0 B0@0 F4@0 B1@0 U1 F5@1 B2@0 F6@1 B3@0 U2",
                                      "F7@2 B4@0 B5@1 U3 B6@1 B7@2 U4"}));
  EXPECT_EQ(step_texts(rule, 4, 4, 2, 3),
            (std::vector<std::string>{"F0@0 B0@0 F1@0 B1@0 U1 F2@1 B2@1 F3@1 B3@1 U2",
                                      "F4@2 B4@2 F5@2 B5@2 U3 F6@3 B6@3 F7@3 B7@3 U4"}));
}

// Each F and B's version is the number of updates the stage ran before it (the forward's, with
// stashing, for a B), counted from the order rather than from the rule's formula.
TEST(PipeDream, VersionsAreTheUpdatesRunBeforeEachAction) {
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 2, 4, 8})
      for (int K : {1, 2, 4}) {
        if (m % K != 0) continue;
        for (bool stashing : {true, false}) {
          const PipeDreamRule rule{K, stashing, false};
          for (int s = 0; s < p; s++) {
            int updates = 0;
            std::map<int, int> forward_version;
            for (const auto& step : pipedream_steps(rule, p, m, 3, s))
              for (const PipeDreamAction& a : step) {
                if (a.kind == PipeDreamKind::update) {
                  EXPECT_EQ(a.version, ++updates);
                } else if (a.kind == PipeDreamKind::forward) {
                  EXPECT_EQ(a.version, updates) << to_text(a) << " p=" << p << " m=" << m << " K=" << K << " stage " << s;
                  forward_version[a.microbatch] = a.version;
                } else {
                  EXPECT_EQ(a.version, stashing ? forward_version.at(a.microbatch) : updates) << to_text(a);
                }
              }
            EXPECT_EQ(updates, 3 * m / K);
          }
        }
      }
}

// Stashing keeps one version per microbatch in flight (PipeDream's w_s = p - s); vertical sync
// keeps stage 0's p on every stage (the versions from the oldest in-flight microbatch's, k - p + 1
// steps behind, to the current); without stashing only the current one.
TEST(PipeDream, VersionsKeptPerStage) {
  EXPECT_EQ(versions_kept(kStashing, 4, 4, 6), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(versions_kept(kNoStashing, 4, 4, 6), (std::vector<int>{1, 1, 1, 1}));
  // Vertical sync, K = 1: at update v, just before its first use F(v + p - 1), stage s holds v and the
  // versions of its p - s - 1 microbatches in flight, v + s + 1 - p .. v - 1.
  EXPECT_EQ(versions_kept(kVerticalSync, 4, 4, 6), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(versions_kept(kVerticalSync, 2, 2, 4), (std::vector<int>{2, 1}));
  // K = 2: stage 0's four in-flight microbatches span two or three versions, the current one among them.
  EXPECT_EQ(versions_kept(PipeDreamRule{2, true, false}, 4, 4, 6), (std::vector<int>{3, 2, 2, 1}));
  // The count is the steady state's: a longer run keeps no more.
  EXPECT_EQ(versions_kept(kStashing, 4, 4, 12), versions_kept(kStashing, 4, 4, 6));
}

// The updates' gradients held apart: with vertical sync stage s has run its backwards through
// v K - 1 + s when it first uses v, so updates v .. v + ceil(s / K) are open (the last one in part
// when K does not divide s), and the updates no forward uses, v K + p > m steps, all wait for the
// run's end: at K = 1 the last p (24 microbatches: 21 .. 24) on every stage, at K = 2 the last 2
// (11, 12) against 1, 2, 2, 3 in the steady state. Otherwise each update follows its backward.
TEST(PipeDream, GradientsKeptPerStage) {
  const auto kept = [](const PipeDreamRule& rule, int p, int m, int steps) {
    std::vector<int> counts;
    for (int s = 0; s < p; s++) counts.push_back(pipedream_gradients_kept(rule, p, m, steps, s));
    return counts;
  };
  EXPECT_EQ(kept(kVerticalSync, 4, 4, 6), (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(kept(PipeDreamRule{2, true, true}, 4, 4, 6), (std::vector<int>{2, 2, 2, 3}));
  EXPECT_EQ(kept(kStashing, 4, 4, 6), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(kept(kNoStashing, 4, 4, 6), (std::vector<int>{1, 1, 1, 1}));
}

// Within every step, the k-th send from stage a to stage b is the k-th receive on b from a, for the
// same tensor: no message crosses a step, so a step's host wait never waits on a peer's next step;
// and the run's lists, steps joined, run without deadlock.
TEST(PipeDream, EverySendAndItsReceiveFallInTheSameStep) {
  for (int p : {2, 4, 8})
    for (int m : {1, 2, 4, 8}) {
      const auto by_step = pipedream_step_schedules(p, m, 4);
      ASSERT_EQ(by_step.size(), 4u);
      for (size_t t = 0; t < by_step.size(); t++) {
        std::map<std::pair<int, int>, std::vector<std::pair<ActionKind, int>>> sent, received;  // by (from, to)
        for (int s = 0; s < p; s++)
          for (const Step& step : by_step[t][s])
            for (const Action& a : step) {
              const bool forward = a.kind == ActionKind::send_forward || a.kind == ActionKind::recv_forward;
              if (a.kind == ActionKind::send_forward || a.kind == ActionKind::send_backward)
                sent[{s, forward ? s + 1 : s - 1}].push_back({forward ? ActionKind::forward : ActionKind::backward, a.microbatch});
              if (a.kind == ActionKind::recv_forward || a.kind == ActionKind::recv_backward)
                received[{forward ? s - 1 : s + 1, s}].push_back({forward ? ActionKind::forward : ActionKind::backward, a.microbatch});
            }
        EXPECT_EQ(sent, received) << "p=" << p << " m=" << m << " step " << t + 1;
      }
      EXPECT_EQ(simulate(pipedream_run_schedules(p, m, 4), {1, 1, 1, 0}).deadlock, "") << "p=" << p << " m=" << m;
    }
}

// One forward per stage pair crosses a step's end: it is sent in its sender's step and received at
// the end of that step, beside the gradient of the step's last backward.
TEST(PipeDream, CrossingForwardIsReceivedAtTheEndOfItsSendersStep) {
  const auto by_step = pipedream_step_schedules(2, 2, 2);
  EXPECT_EQ(to_text(by_step[0][0]), "F0 sF0 F1 sF1+rB0 B0 F2 sF2+rB1 B1");
  EXPECT_EQ(to_text(by_step[1][0]), "F3 sF3+rB2 B2 rB3 B3");
  EXPECT_EQ(to_text(by_step[0][1]), "rF0 F0 B0 sB0+rF1 F1 B1 sB1+rF2");
  EXPECT_EQ(to_text(by_step[1][1]), "F2 B2 sB2+rF3 F3 B3 sB3");
}

// The whole run through the simulator (rendezvous messages, F = 1, B = 2): no deadlock, and between
// the warm-up and the cool-down no stage idles: each middle step lasts exactly its m F's and m B's.
TEST(PipeDream, SteadyStepsHaveNoIdle) {
  for (int p : {2, 4})
    for (int m : {p, 2 * p}) {
      const int steps = 5;
      const std::vector<StageSchedule> run = pipedream_run_schedules(p, m, steps);
      const Simulation sim = simulate(run, {1, 1, 1, 0});
      ASSERT_EQ(sim.deadlock, "");
      const auto by_step = pipedream_step_schedules(p, m, steps);
      for (int s = 0; s < p; s++) {
        std::vector<double> step_end;  // the end of the stage's last compute of each step
        size_t i = 0;
        for (int t = 0; t < steps; t++) {
          i += by_step[t][s].size();
          size_t last = i - 1;
          while (!is_compute(run[s][last])) last--;
          step_end.push_back(sim.end_time[s][last]);
        }
        for (int t = 1; t + 1 < steps; t++)
          EXPECT_EQ(step_end[t] - step_end[t - 1], 3.0 * m) << "p=" << p << " m=" << m << " stage " << s << " step " << t + 1;
      }
    }
}

TEST(PipeDream, BadRulesAreRefusedInOneLine) {
  EXPECT_EQ(error_of([] { check_pipedream({3, true, false}, 4, 4, 1); }),
            "--update-every 3 must divide --microbatches 4 (an update may not straddle the end of a step, where "
            "checkpoints are written)");
  EXPECT_EQ(error_of([] { check_pipedream({1, false, true}, 4, 4, 1); }),
            "--vertical-sync needs --weight-stashing on (a backward must find the version its forward used)");
  EXPECT_EQ(error_of([] { check_pipedream({1, true, false}, 4, 4, 0); }), "pipedream needs at least one step; got 0");
  EXPECT_EQ(error_of([] { check_pipedream({1, true, false}, 4, 4, 1); }), "(no error)");
}
