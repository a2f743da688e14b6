// The watchdog of a run (trainer/safety/watchdog.h): its report names the rank, the training step and
// the schedule step with its position and marks it in the stage's row; it fires once nothing has
// moved for the timeout (four times the timeout in the first step), and not while the training
// steps advance, nor while the executor's position within one step longer than the timeout does.
// The executor watched is a single-process trainer's (tiny model); the activity is set by hand, and
// the position in a step by the test, which plays the executor's part over its own step events.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_check.cuh"
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

// When the watchdog (timeout_s) fired on an activity left at training_step, in seconds from its
// start (-1: not within wait_s), and the longest the test's own 20 ms sleeps overslept meanwhile:
// how late this machine, in this run, woke a sleeping thread.
struct Firing {
  double seconds = -1;
  double oversleep = 0;
};

Firing fire_on_stillness(double timeout_s, int training_step, double wait_s) {
  Trainer<float> trainer = create_trainer<float>(make_gpt_config(2, 2, 16, 16, 64), 2, 16, 2);
  RunActivity activity;
  activity.training_step = training_step;
  activity.phase = "validation";
  Fired fired;
  Firing firing;
  const Clock::time_point begin = Clock::now();
  Watchdog* dog = start_watchdog(timeout_s, {0, 0, 0}, trainer.executor, activity, [&](const std::string& report) {
    fired.report = report;
    fired.at = Clock::now();
    fired.fired = true;
  });
  const auto nap = std::chrono::milliseconds(20);
  while (!fired.fired && Clock::now() - begin < std::chrono::duration<double>(wait_s)) {
    const Clock::time_point before = Clock::now();
    std::this_thread::sleep_for(nap);
    firing.oversleep = std::max(firing.oversleep, std::chrono::duration<double>(Clock::now() - before - nap).count());
  }
  stop_watchdog(dog);
  destroy_trainer(trainer);
  if (!fired.fired) return firing;
  // "stuck N s": the seconds since the last move, which a loaded machine may make longer.
  const std::string prefix = "train: error: rank 0 (stage 0, replica 0): step " + std::to_string(training_step) + ", stuck ";
  EXPECT_EQ(fired.report.substr(0, prefix.size()), prefix) << fired.report;
  EXPECT_EQ(fired.report.substr(fired.report.size() - 16), " s in validation") << fired.report;
  firing.seconds = std::chrono::duration<double>(fired.at - begin).count();
  return firing;
}

// The watchdog wakes every poll (a tenth of the timeout, at least 0.25 s: watchdog.cpp); its first
// wake only notes where the progress stands, and it fires at the first wake that finds nothing
// moved for `stillness` (the timeout, or four in the first step) since: never before `stillness`,
// and by `stillness` plus two polls on a machine that wakes threads on time. Each wait is counted
// from the wake before, so each wake's lateness adds up: the bound adds, per wake, the most the
// test's own sleeps overslept in the same run, and 0.1 s for the report's own work (text, no I/O).
// A run in which the test's sleeps overslept by more than a poll (a machine that stalls threads
// that long makes any bound a guess) proves nothing and is run again, up to 5 times.
void expect_fires_after(double timeout_s, int training_step, double stillness_s) {
  const double poll_s = std::max(0.25, std::min(1.0, timeout_s / 10));
  Firing firing;
  for (int attempt = 0; attempt < 5; ++attempt) {
    firing = fire_on_stillness(timeout_s, training_step, 20 * stillness_s);
    if (firing.oversleep > poll_s) continue;
    ASSERT_GE(firing.seconds, stillness_s) << "did not fire, or fired early";
    const double wakes = stillness_s / poll_s + 2;
    EXPECT_LE(firing.seconds, stillness_s + 2 * poll_s + wakes * firing.oversleep + 0.1)
        << "the test's sleeps overslept by at most " << firing.oversleep << " s";
    return;
  }
  ADD_FAILURE() << "the machine stalled the test's thread by more than a poll in every run (the last: "
                << firing.oversleep << " s)";
}

// Holds a stream until opened.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  static void wait(void* gate) { static_cast<Gate*>(gate)->opened.wait(); }
};

// The test in execute_step's part (pipeline/execute.cu): a walk begun, every schedule step's end
// event queued on the stream, each behind a gate of its own, so the device is in schedule step i
// until gates 0..i have opened. Destroying it opens the rest, waits for the stream and ends the walk.
class GatedStep {
 public:
  explicit GatedStep(Executor<float>& executor) : executor_(executor), gates_(executor.schedule.size()) {
    for (size_t i = 0; i < gates_.size(); ++i) {
      CUDA_CHECK(cudaLaunchHostFunc(executor.stream, Gate::wait, &gates_[i]));
      CUDA_CHECK(cudaEventRecord(executor.step_end[i], executor.stream));
    }
    std::lock_guard<std::mutex> lock(executor.progress->mutex);
    executor.progress->walks += 1;
    executor.progress->walking = true;
    executor.progress->queued = int(gates_.size());
  }
  ~GatedStep() {
    for (size_t i = opened_; i < gates_.size(); ++i) gates_[i].open.set_value();
    CUDA_CHECK(cudaStreamSynchronize(executor_.stream));
    std::lock_guard<std::mutex> lock(executor_.progress->mutex);
    executor_.progress->walking = false;
  }
  int size() const { return int(gates_.size()); }
  // Lets schedule step `opened_` end, and returns once its end event has completed.
  void end_next_step() {
    gates_[opened_].open.set_value();
    CUDA_CHECK(cudaEventSynchronize(executor_.step_end[opened_]));
    opened_ += 1;
  }

 private:
  Executor<float>& executor_;
  std::vector<Gate> gates_;
  size_t opened_ = 0;
};

// The longest the progress may have stood still, by the test's clock: from just before one move
// to just after the next has taken effect (and from the start to the first, and from the last to
// the end). A move takes effect between those two readings, so the watchdog, which fires only
// after seeing no move for the timeout, cannot have seen a longer stillness; a machine that
// stops the test's thread for a while shows here.
class StillnessMeter {
 public:
  template <typename Move>
  void move(Move make_the_move) {
    const Clock::time_point before = Clock::now();
    make_the_move();
    note(Clock::now());
    since_ = before;
  }
  double longest_until_now() {
    note(Clock::now());
    return longest_;
  }

 private:
  void note(Clock::time_point after) {
    longest_ = std::max(longest_, std::chrono::duration<double>(after - since_).count());
  }
  Clock::time_point since_ = Clock::now();
  double longest_ = 0;
};

using Moves = std::function<void(Executor<float>& executor, RunActivity& activity, StillnessMeter& meter)>;

// The watchdog (timeout_s) may rightly fire once the progress stood still for the timeout, which
// a loaded machine that stops the test's thread that long brings about: such a run proves nothing
// and is run again, up to 5 times. In a run whose progress never stood still for the timeout (by
// the meter), the watchdog must not have fired: no wall-clock margin is assumed.
void expect_quiet_while(double timeout_s, const Moves& moves) {
  double longest = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    Trainer<float> trainer = create_trainer<float>(make_gpt_config(2, 2, 16, 16, 64), 2, 16, 8);
    RunActivity activity;
    activity.training_step = 2;
    activity.phase = kTrainingStepPhase;
    std::atomic<bool> fired{false};
    StillnessMeter meter;
    Watchdog* dog =
        start_watchdog(timeout_s, {0, 0, 0}, trainer.executor, activity, [&](const std::string&) { fired = true; });
    moves(trainer.executor, activity, meter);
    stop_watchdog(dog);
    longest = meter.longest_until_now();
    destroy_trainer(trainer);
    if (longest < timeout_s) {
      EXPECT_FALSE(fired) << "fired, though the progress never stood still for more than " << longest << " s";
      return;
    }
  }
  ADD_FAILURE() << "the test's thread was stopped for the timeout in every run (the last: " << longest << " s)";
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

TEST(Watchdog, FiresOnceNothingMovesForTheTimeout) { expect_fires_after(0.5, 5, 0.5); }

TEST(Watchdog, FirstStepGetsFourTimesTheTimeout) { expect_fires_after(0.5, 1, 4 * 0.5); }

// The progress moves every 0.1 s, a fifth of the timeout, for four timeouts.
TEST(Watchdog, DoesNotFireWhileTheTrainingStepsAdvance) {
  expect_quiet_while(0.5, [](Executor<float>&, RunActivity& activity, StillnessMeter& meter) {
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      meter.move([&] { activity.training_step += 1; });
    }
  });
}

// One training step of 16 schedule steps (8 microbatches) that lasts three timeouts: the device
// ends a schedule step every 0.1 s, while the training step and the phase stay as they are.
TEST(Watchdog, DoesNotFireWhileThePositionInALongStepAdvances) {
  expect_quiet_while(0.5, [](Executor<float>& executor, RunActivity&, StillnessMeter& meter) {
    const Clock::time_point begin = Clock::now();
    std::unique_ptr<GatedStep> step;
    meter.move([&] { step = std::make_unique<GatedStep>(executor); });
    ASSERT_EQ(step->size(), 16);
    // Ending the last schedule step leaves the position where it is (schedule_position): not a move.
    for (int i = 0; i + 1 < step->size(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      meter.move([&] { step->end_next_step(); });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    meter.move([&] { step.reset(); });
    EXPECT_GE(std::chrono::duration<double>(Clock::now() - begin).count(), 3 * 0.5) << "a step longer than the timeout";
  });
}

// The device stays in the step's first schedule step: the watchdog fires, naming it.
TEST(Watchdog, FiresWhenThePositionInAStepStandsStill) {
  Trainer<float> trainer = create_trainer<float>(make_gpt_config(2, 2, 16, 16, 64), 2, 16, 8);
  RunActivity activity;
  activity.training_step = 5;
  activity.phase = kTrainingStepPhase;
  Fired fired;
  std::string expected_end;
  {
    GatedStep step(trainer.executor);
    expected_end = ", step 1 of " + std::to_string(step.size()) + " of its schedule";
    Watchdog* dog = start_watchdog(0.5, {0, 0, 0}, trainer.executor, activity, [&](const std::string& report) {
      fired.report = report;
      fired.fired = true;
    });
    // A hang of the watchdog is ended after 60 s; it fires after 0.5 to 0.75 s on an idle machine.
    for (int i = 0; i < 3000 && !fired.fired; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop_watchdog(dog);
  }
  destroy_trainer(trainer);
  ASSERT_TRUE(fired.fired) << "no report in 60 s";
  const std::string first_line = fired.report.substr(0, fired.report.find('\n'));
  const std::string prefix = "train: error: rank 0 (stage 0, replica 0): step 5, stuck ";
  EXPECT_EQ(first_line.substr(0, prefix.size()), prefix) << first_line;
  ASSERT_GE(first_line.size(), expected_end.size());
  EXPECT_EQ(first_line.substr(first_line.size() - expected_end.size()), expected_end) << first_line;
}
