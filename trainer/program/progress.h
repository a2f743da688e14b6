// What a run tells its reader about time and outcome: after each step line, the time elapsed and
// an estimate of the time left; at the end, one summary line of the whole run.
#pragma once
#include <string>
#include <vector>

#include "trainer/log.h"

// 42.4 -> "42s", 185 -> "3m05s", 3725 -> "1h02m".
std::string format_duration(double seconds);

// The median of values (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

// "1m02s elapsed, ~12m30s left": the time left is the median step time so far (a validation,
// a sample or a slow step does not sway it) times the steps still to do.
std::string format_progress(double elapsed_seconds, double median_step_seconds, int steps_left);

// Where a run put what it made; empty: nothing (the summary says which option would).
struct RunOutputs {
  std::string checkpoint;  // --save
  std::string log;         // --log
};

// "done: 2000/2000 steps in 12m31s | loss 1.3832 | val 1.4816, best 1.4816 at step 2000 | median 5.5k tok/s
//  | saved run.bin and run.bin.state | log run.jsonl", of the steps this run did (the val part
// only when it validated; "no steps" when it did none).
std::string format_summary_line(const std::vector<StepRecord>& steps, double wall_seconds, const RunOutputs& outputs);
