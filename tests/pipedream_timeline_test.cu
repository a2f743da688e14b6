// The predicted timeline of PipeDream's asynchronous pipeline (pipeline/pipedream_timeline.h), what
// `./train --schedule pipedream --print-schedule --trace FILE` writes: a steady step without idle
// against 1F1B's (p - 1) / (m + p - 1) at the same costs, each update where the rule puts it, and
// each compute's weight version. Every figure is derived by hand from t_f = 1, B = 2 (t_i = t_w = 1),
// no latency: exact in a double. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/pipedream_timeline.h"

namespace {

const StepCosts kCosts{1, 1, 1, 0};  // t_f = 1, a backward 2

// The stage's event named name ("B3", "U2"); fails the test when there is none.
const TimelineEvent& event(const Timeline& timeline, int stage, const std::string& name) {
  for (const TimelineEvent& e : timeline.events)
    if (e.stage == stage && e.name == name) return e;
  ADD_FAILURE() << "stage " << stage << " has no event " << name;
  static const TimelineEvent none{};
  return none;
}

double end(const TimelineEvent& e) { return e.start_us + e.duration_us; }

int count(const Timeline& timeline, int stage, const std::string& category) {
  int n = 0;
  for (const TimelineEvent& e : timeline.events) n += e.stage == stage && e.category == category;
  return n;
}

// The end of the compute that precedes `next` on the stage (the latest to end before it starts).
double end_before(const Timeline& timeline, int stage, const TimelineEvent& next) {
  double latest = 0;
  for (const TimelineEvent& e : timeline.events)
    if (e.stage == stage && e.category != "transfer" && e.category != "update" && end(e) <= next.start_us)
      latest = std::max(latest, end(e));
  return latest;
}

}  // namespace

// Step 2 of 3 (microbatches 4 .. 7) on each stage runs from the end of B3 to the end of B7: m (t_f +
// t_b) = 12 ms of computes and no idle, where one 1F1B step of the same costs takes (m + p - 1) 3 =
// 21 ms, 9 of them idle: (p - 1) / (m + p - 1) = 3/7.
TEST(PipeDreamTimeline, ASteadyStepHasNoIdleWhere1F1BHasThreeSevenths) {
  const int p = 4, m = 4;
  const Timeline timeline = pipedream_predicted_timeline({}, p, m, 3, kCosts, 1e3);
  for (int s = 0; s < p; s++) {
    const double from = end(event(timeline, s, "B3")), to = end(event(timeline, s, "B7"));
    double busy = 0;
    for (const TimelineEvent& e : timeline.events)
      if (e.stage == s && e.category != "transfer" && e.start_us >= from && end(e) <= to) busy += e.duration_us;
    EXPECT_EQ(to - from, 12e3) << "stage " << s;
    EXPECT_EQ(busy, 12e3) << "stage " << s;
  }
  const Simulation flushed = simulate(make_all_schedules(ScheduleKind::one_f_one_b, p, m, 1), kCosts);
  EXPECT_EQ(flushed.makespan, 21);
  for (int s = 0; s < p; s++) EXPECT_DOUBLE_EQ(flushed.stages[s].idle_share, 3.0 / 7) << "stage " << s;
}

// Without vertical sync update v follows the backward of microbatch v K - 1 at once: K = 1, 12
// updates in 3 steps of 4 on every stage, U(v) at the end of B(v - 1); K = 2, 6, U(v) at B(2 v - 1)'s.
TEST(PipeDreamTimeline, AnUpdateEndsTheBackwardThatCompletesIt) {
  for (const int K : {1, 2}) {
    const Timeline timeline = pipedream_predicted_timeline({K, true, false}, 4, 4, 3, kCosts, 1e3);
    for (int s = 0; s < 4; s++) {
      EXPECT_EQ(count(timeline, s, "update"), 12 / K) << "K " << K << " stage " << s;
      for (int v = 1; v <= 12 / K; v++) {
        const TimelineEvent& update = event(timeline, s, "U" + std::to_string(v));
        EXPECT_EQ(update.start_us, end(event(timeline, s, "B" + std::to_string(v * K - 1))))
            << "K " << K << " stage " << s << " U" << v;
        EXPECT_EQ(update.duration_us, 0);
      }
    }
  }
}

// With vertical sync update v waits for its first use, the forward of microbatch v + p - 1 (K = 1),
// on every stage: it runs right after the compute before that forward; the cool-down's p updates,
// which no forward uses, after the stage's last backward.
TEST(PipeDreamTimeline, WithVerticalSyncAnUpdateWaitsForItsFirstUse) {
  const int p = 4, m = 4, last = 3 * m - 1;
  const Timeline timeline = pipedream_predicted_timeline({1, true, true}, p, m, 3, kCosts, 1e3);
  for (int s = 0; s < p; s++) {
    for (int v = 1; v + p - 1 <= last; v++) {
      const TimelineEvent& use = event(timeline, s, "F" + std::to_string(v + p - 1));
      EXPECT_EQ(event(timeline, s, "U" + std::to_string(v)).start_us, end_before(timeline, s, use))
          << "stage " << s << " U" << v;
    }
    for (int v = last - p + 2; v <= last + 1; v++)
      EXPECT_EQ(event(timeline, s, "U" + std::to_string(v)).start_us, end(event(timeline, s, "B" + std::to_string(last))))
          << "stage " << s << " U" << v;
  }
}

// Each compute carries the version it uses: on stage 0 of 4, F7 after 4 updates and B4 with its
// forward's version 1 (the report's "F7@4 B4@1"); without stashing B4 takes the latest, 4.
TEST(PipeDreamTimeline, EachComputeNamesItsWeightVersion) {
  const Timeline stashing = pipedream_predicted_timeline({}, 4, 4, 3, kCosts, 1e3);
  EXPECT_EQ(event(stashing, 0, "F7").details, "weights v4");
  EXPECT_EQ(event(stashing, 0, "B4").details, "weights v1");
  const Timeline latest = pipedream_predicted_timeline({1, false, false}, 4, 4, 3, kCosts, 1e3);
  EXPECT_EQ(event(latest, 0, "B4").details, "weights v4");
}
