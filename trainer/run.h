// One training run as the train program performs it, on one rank of a dp x pp mesh (a single
// process is the mesh of one): the setup each rank checks alone, the --print-schedule report,
// and the step loop with validation, samples, checkpoints and logging.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "model/gpt.cuh"
#include "trainer/checkpoints.h"
#include "trainer/data.h"
#include "trainer/log.h"
#include "trainer/options.h"
#include "trainer/trainer.h"

// What a run is, decided and checked by each rank alone, before any communication, so that a
// bad layout fails on every rank at once with the same one-line message and nobody waits.
struct RunSetup {
  TrainOptions options;
  StartingPoint start;
  int B, T;
  TrainValSplit data;
  Mesh mesh;
  PipelineLayout layout;
  std::vector<LayerRange> virtual_stages;  // split_layers
};

// Throws std::runtime_error with one line: bad data or checkpoint, dp pp != the world size,
// fewer layers than stages x chunks, a --layers-per-stage that does not fit, a schedule that
// does not fit the microbatches. Says on out (nullptr: silent) what it reads that may take a while.
RunSetup prepare_run(const TrainOptions& options, std::FILE* out = nullptr);

// The chosen schedule's grid for every stage, its timeline and the simulator's predicted idle
// share and activation memory (peak in-flight microbatches x slot bytes) per stage
// (t_b = 2 t_f, no latency).
std::string schedule_report(const RunSetup& setup);

struct RunResult {
  std::vector<StepRecord> steps;     // the steps this run did (after the resumed step, if any)
  std::vector<std::string> samples;  // the decoded samples, in order
};

// Runs options.steps optimizer steps (fewer when resuming), printing the banner, each step's line
// with the time elapsed and left, the samples and a closing summary line to out (nullptr: silent;
// give it on world rank 0 only). Every rank of the world calls it. Throws std::runtime_error with
// one line on bad input. An error once the communicators exist may be this rank's alone while its
// peers wait on it: the communicators are then aborted and the device memory is left allocated
// (trainer/run.cpp says why); the caller ends the job.
RunResult run_training(const RunSetup& setup, std::FILE* out);
RunResult run_training(const TrainOptions& options, std::FILE* out);
