// One single-process training run as the train program performs it: data, model, the step
// loop with validation, samples, checkpoints and logging.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "trainer/log.h"
#include "trainer/options.h"

struct RunResult {
  std::vector<StepRecord> steps;     // the steps this run did (after the resumed step, if any)
  std::vector<std::string> samples;  // the decoded samples, in order
};

// Runs options.steps optimizer steps (fewer when resuming), printing the banner, each step's line
// and the samples to out (nullptr: silent). Throws std::runtime_error with one line on bad input.
RunResult run_training(const TrainOptions& options, std::FILE* out);
