// The watchdog of a run (trainer/safety/watchdog.h): its report names the rank, the training step and
// the schedule step with its position and marks it in the stage's row; it fires once nothing has
// moved for the timeout (four times the timeout in the first step), and not while steps advance.
// The executor watched is a single-process trainer's (tiny model); the activity is set by hand.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "model/config.h"
#include "trainer/step/trainer.h"
#include "trainer/safety/watchdog.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Fired {
  std::atomic<bool> fired{false};
  std::string report;
  Clock::time_point at;
};

// Seconds until the watchdog (timeout_s) fires on an activity left at training_step, or -1 when
// it has not after wait_s.
double seconds_until_fired(double timeout_s, int training_step, double wait_s) {
  Trainer<float> trainer = create_trainer<float>(make_gpt_config(2, 2, 16, 16, 64), 2, 16, 2);
  RunActivity activity;
  activity.training_step = training_step;
  activity.phase = "validation";
  Fired fired;
  const Clock::time_point begin = Clock::now();
  Watchdog* dog = start_watchdog(timeout_s, {0, 0, 0}, trainer.executor, activity, [&](const std::string& report) {
    fired.report = report;
    fired.at = Clock::now();
    fired.fired = true;
  });
  while (!fired.fired && Clock::now() - begin < std::chrono::duration<double>(wait_s))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop_watchdog(dog);
  destroy_trainer(trainer);
  if (!fired.fired) return -1;
  // "stuck N s": the seconds since the last move, which a loaded machine may make longer.
  const std::string prefix = "train: error: rank 0 (stage 0, replica 0): step " + std::to_string(training_step) + ", stuck ";
  EXPECT_EQ(fired.report.substr(0, prefix.size()), prefix) << fired.report;
  EXPECT_EQ(fired.report.substr(fired.report.size() - 16), " s in validation") << fired.report;
  return std::chrono::duration<double>(fired.at - begin).count();
}

}  // namespace

TEST(Watchdog, ReportNamesTheStepAndItsPositionAndMarksItInTheStagesRow) {
  const StageSchedule schedule = make_schedule(ScheduleKind::one_f_one_b, 4, 4, 1, 2);
  const std::string step = to_text(schedule[6]);
  const std::string report = stuck_report({6, 2, 1}, 812, 300.2, kTrainingStepPhase, {9, 6}, schedule);
  const std::string first_line = report.substr(0, report.find('\n'));
  const std::string row = report.substr(report.find('\n') + 1);
  EXPECT_EQ(first_line, "train: error: rank 6 (stage 2, replica 1): step 812, stuck 300 s in " + step + ", step 7 of " +
                            std::to_string(schedule.size()) + " of its schedule");
  EXPECT_EQ(row.rfind("stage 2 |", 0), 0u) << row;
  EXPECT_NE(row.find(">" + step + "<"), std::string::npos) << row;
  EXPECT_EQ(row.find('>'), row.rfind('>')) << "one step marked: " << row;
}

TEST(Watchdog, OutsideTheScheduleTheReportNamesThePhase) {
  const StageSchedule schedule = make_schedule(ScheduleKind::one_f_one_b, 2, 2, 1, 0);
  EXPECT_EQ(stuck_report({0, 0, 0}, 3, 5, kTrainingStepPhase, {4, -1}, schedule),
            "train: error: rank 0 (stage 0, replica 0): step 3, stuck 5 s in the step's gradient sums, norm and loss "
            "sum, after its schedule");
  EXPECT_EQ(stuck_report({0, 0, 0}, 3, 5, "sampling", {4, -1}, schedule),
            "train: error: rank 0 (stage 0, replica 0): step 3, stuck 5 s in sampling");
}

// A poll interval is a tenth of the timeout, at least 0.25 s: a report comes within the timeout
// plus 0.25 s, later only when the machine is loaded, never earlier.
TEST(Watchdog, FiresOnceNothingMovesForTheTimeout) {
  const double seconds = seconds_until_fired(0.5, 5, 10.0);
  EXPECT_GE(seconds, 0.5);
  EXPECT_LT(seconds, 5.0);
}

TEST(Watchdog, FirstStepGetsFourTimesTheTimeout) {
  const double seconds = seconds_until_fired(0.5, 1, 10.0);
  EXPECT_GE(seconds, 4 * 0.5);
  EXPECT_LT(seconds, 8.0);
}

TEST(Watchdog, DoesNotFireWhileTheTrainingStepsAdvance) {
  Trainer<float> trainer = create_trainer<float>(make_gpt_config(2, 2, 16, 16, 64), 2, 16, 2);
  RunActivity activity;
  activity.training_step = 2;
  std::atomic<bool> fired{false};
  Watchdog* dog = start_watchdog(0.5, {0, 0, 0}, trainer.executor, activity, [&](const std::string&) { fired = true; });
  for (int i = 0; i < 20; ++i) {  // 2 s, four timeouts, a step every 0.1 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    activity.training_step += 1;
  }
  stop_watchdog(dog);
  destroy_trainer(trainer);
  EXPECT_FALSE(fired);
}
