// What a run says about time and outcome (trainer/program/progress.h): durations, the median step time,
// the time left on each step line, and the closing summary line, alone and in a short real run.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/file_tools.h"
#include "tests/tiny_run.h"
#include "trainer/command_line/options.h"
#include "trainer/program/progress.h"
#include "trainer/program/run.h"

namespace {

StepRecord step_record(int step, int steps, double loss, double tokens_per_s) {
  return {step, steps, loss, false, 0.0, 3e-4, 0.5, 100.0, tokens_per_s, {}, {}};
}

StepRecord with_val(StepRecord record, double val_loss) {
  record.has_val_loss = true;
  record.val_loss = val_loss;
  return record;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST(Progress, DurationsReadAsSecondsMinutesOrHours) {
  EXPECT_EQ(format_duration(0.2), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(-3), "0s");  // a clock read twice never gives less than nothing
}

TEST(Progress, MedianIsTheMiddleValueOrTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({5.0}), 5.0);
  EXPECT_EQ(median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_EQ(median({4.0, 1.0, 100.0, 2.0}), 3.0);  // one slow step does not move it
}

TEST(Progress, TimeLeftIsPrintedUntilTheLastStep) {
  EXPECT_EQ(format_progress(62, 750, 1500), "1m02s elapsed, ~12m30s left");
  EXPECT_EQ(format_progress(750, 30, 0), "12m30s elapsed");  // the last step
}

// The issue's run: 4 steps to go at 1 s each, a validation (every 100 and at the end) of 50 s
// and a sample (every 200) of 70 s still to come: 4 + 50 + 70 s, not the 4 s of the steps alone.
TEST(Progress, TimeLeftCountsTheValidationsAndSamplesStillToCome) {
  EXPECT_EQ(scheduled_in(100, 1996, 2000, true), 1);
  EXPECT_EQ(scheduled_in(200, 1996, 2000, false), 1);
  EXPECT_DOUBLE_EQ(seconds_left({4, 1.0, 1, 50.0, 1, 70.0}), 124.0);
  EXPECT_DOUBLE_EQ(seconds_left({4, 1.0, 0, 50.0, 0, 70.0}), 4.0);
}

// The line after step 200 of the default run: its validation is done, its sample still to come
// (the sample follows the line), so 10 samples (200, 400, .., 2000) and 18 validations (300, ..,
// 2000) are left. Costs are the medians so far; before the first sample its cost is the prior:
// a forward of one of B sequences is a third of a step over microbatches B, sample_len of them.
TEST(Progress, WorkLeftCountsTheSampleAfterThisLineAndUsesPriorsUntilMeasured) {
  TrainOptions options;  // 2000 steps, validation every 100 (8 batches), a sample every 200 (128 tokens)
  options.steps = 2000;
  options.val_every = 100;
  options.sample_every = 200;
  options.val_batches = 8;
  options.sample_len = 128;
  options.microbatches = 4;
  const WorkLeft left = work_left(options, 200, true, true, {1.2, 1.2, 1.2}, {0.5}, {}, 8);
  EXPECT_EQ(left.steps, 1800);
  EXPECT_DOUBLE_EQ(left.step_seconds, 1.2);
  EXPECT_EQ(left.validations, 18);
  EXPECT_DOUBLE_EQ(left.validation_seconds, 0.5);
  EXPECT_EQ(left.samples, 10);
  EXPECT_DOUBLE_EQ(left.sample_seconds, 1.2 / 4 / 3 / 8 * 128);
  // Before any validation its prior: val_batches microbatch forwards.
  EXPECT_DOUBLE_EQ(work_left(options, 1, true, false, {1.2}, {}, {}, 8).validation_seconds, 1.2 / 4 / 3 * 8);
  // Without validation or sampling in the run, none is counted.
  const WorkLeft bare = work_left(options, 200, false, false, {1.2}, {}, {}, 8);
  EXPECT_EQ(bare.validations, 0);
  EXPECT_EQ(bare.samples, 0);
}

TEST(Progress, ScheduledWorkIsCountedOverTheStepsStillToDo) {
  EXPECT_EQ(scheduled_in(100, 0, 2000, true), 20);    // 100, 200, ..., 2000 (the last is one of them)
  EXPECT_EQ(scheduled_in(100, 100, 2000, true), 19);  // step 100's is done
  EXPECT_EQ(scheduled_in(100, 99, 2000, true), 20);
  EXPECT_EQ(scheduled_in(300, 0, 2000, true), 7);     // 300 .. 1800, then the last step's
  EXPECT_EQ(scheduled_in(300, 0, 2000, false), 6);
  EXPECT_EQ(scheduled_in(0, 0, 2000, true), 1);       // only the last step's
  EXPECT_EQ(scheduled_in(0, 0, 2000, false), 0);
  EXPECT_EQ(scheduled_in(100, 2000, 2000, true), 0);  // nothing after the last step
}

TEST(Progress, SummaryNamesLossesSpeedWallTimeAndWhereThingsWent) {
  const std::vector<StepRecord> steps = {
      step_record(1, 3, 5.6, 1000), with_val(step_record(2, 3, 2.5, 3000), 2.25),
      with_val(step_record(3, 3, 2.125, 2000), 2.375)};
  EXPECT_EQ(format_summary_line(steps, 125, {"run.bin", "run.jsonl", 3}),
            "done: 3/3 steps in 2m05s | loss 2.1250 | val 2.3750, best 2.2500 at step 2 | median 2.0k tok/s"
            " | saved run.bin and run.bin.state | log run.jsonl");
  // Saved at step 2 of the 3 done, or never (every save skipped): the summary says so.
  EXPECT_EQ(format_summary_line(steps, 125, {"run.bin", "", 2}).substr(94),
            " | saved run.bin and run.bin.state at step 2 | no log (--log FILE)");
  EXPECT_EQ(format_summary_line(steps, 125, {"run.bin", "", -1}).substr(94),
            " | run.bin not written by this run | no log (--log FILE)");
  EXPECT_EQ(format_summary_line({steps[0]}, 2, {"", ""}),
            "done: 1/3 steps in 2s | loss 5.6000 | median 1.0k tok/s | no checkpoint (--save FILE) | no log (--log FILE)");
}

TEST(Progress, SummaryOfAResumedRunSaysHowManyStepsItDid) {
  const std::vector<StepRecord> steps = {step_record(9, 10, 1.5, 800), step_record(10, 10, 1.25, 800)};
  EXPECT_EQ(format_summary_line(steps, 3, {"", ""}).substr(0, 40), "done: 10/10 steps (2 in this run) in 3s ");
  EXPECT_EQ(format_summary_line({}, 0.4, {"", ""}), "done: no steps to do in 0s");
}

// A short real run: every step line but the last ends with the time elapsed and left, the last
// with the time elapsed, and the run's last line is the summary.
TEST(Progress, ShortRunPrintsTimeLeftOnEachStepAndEndsWithTheSummary) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "In the beginning God created the heaven and the earth.\n";
  std::ofstream(dir.file("text.txt")) << text;
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.steps = 4;
  options.val_every = 2;
  options.val_batches = 1;
  options.log = dir.file("run.jsonl");
  std::FILE* out = std::fopen(dir.file("out.txt").c_str(), "w");
  ASSERT_NE(out, nullptr);

  run_training(options, out);
  std::fclose(out);

  std::ifstream file(dir.file("out.txt"));
  const std::vector<std::string> lines = lines_of({std::istreambuf_iterator<char>(file), {}});
  std::vector<std::string> step_lines;
  for (const std::string& line : lines)
    if (line.rfind("step ", 0) == 0) step_lines.push_back(line);
  ASSERT_EQ(step_lines.size(), 4u);
  const std::regex with_time_left(R"(step [1-3]/4 \| .* tok/s \| \d+s elapsed, ~\d+s left)");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::regex_match(step_lines[i], with_time_left)) << step_lines[i];
  EXPECT_TRUE(std::regex_match(step_lines[3], std::regex(R"(step 4/4 \| .* tok/s \| \d+s elapsed)"))) << step_lines[3];
  const std::regex summary(R"(done: 4/4 steps in \d+s \| loss \d\.\d{4} \| val \d\.\d{4}, best \d\.\d{4} at step [24])"
                           R"( \| median [0-9.]+k? tok/s \| no checkpoint \(--save FILE\) \| log )" +
                           dir.file("run.jsonl"));
  EXPECT_TRUE(std::regex_match(lines.back(), summary)) << lines.back();
}
