// What a run tells its reader about time and outcome: after each step line, the time elapsed and
// an estimate of the time left; at the end, one summary line of the whole run.
#pragma once
#include <string>
#include <vector>

#include "trainer/command_line/options.h"
#include "trainer/program/log.h"

// 42.4 -> "42s", 185 -> "3m05s", 3725 -> "1h02m".
std::string format_duration(double seconds);

// The median of values (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

// What a run still has to do, and what one of each costs in seconds: the median so far (a slow
// step does not sway it), or before the first of its kind a prior the run states.
struct WorkLeft {
  int steps = 0;
  double step_seconds = 0;
  int validations = 0;
  double validation_seconds = 0;
  int samples = 0;
  double sample_seconds = 0;
};
double seconds_left(const WorkLeft& left);

// How many of the steps in (done, steps] do a thing done every `interval` steps (0: never),
// counting the last step too when at_last (the final validation).
int scheduled_in(int interval, int done, int steps, bool at_last);

// The work left after `done` steps of a run with these options, at the median costs so far of
// the steps, validations and samples (the priors before the first: progress.cpp says which).
WorkLeft work_left(const TrainOptions& options, int done, bool validating, bool sampling,
                   const std::vector<double>& step_seconds, const std::vector<double>& validation_seconds,
                   const std::vector<double>& sample_seconds, int B);

// "1m02s elapsed, ~12m30s left" (no time left after the last step).
std::string format_progress(double elapsed_seconds, double seconds_left, int steps_left);

// Where a run put what it made; empty: nothing (the summary says which option would).
struct RunOutputs {
  std::string checkpoint;  // --save
  std::string log;         // --log
  int saved_step = -1;     // the last step this run wrote to checkpoint (-1: none)
};

// "done: 2000/2000 steps in 12m31s | loss 1.3832 | val 1.4816, best 1.4816 at step 2000 | median 5.5k tok/s
//  | saved run.bin and run.bin.state | log run.jsonl", of the steps this run did (the val part
// only when it validated; "no steps" when it did none). A checkpoint saved before the last step
// done says its step; one never written (every save skipped or refused) says so.
std::string format_summary_line(const std::vector<StepRecord>& steps, double wall_seconds, const RunOutputs& outputs);
