// One training run as the train program performs it, on one rank of a dp x pp mesh (a single
// process is the mesh of one): the setup each rank checks alone, and the step loop with
// validation, samples, checkpoints and logging (the --print-schedule report:
// trainer/program/schedule_report.h).
#pragma once
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "model/gpt.cuh"
#include "trainer/checkpoints/save_and_resume.h"
#include "trainer/data/data.h"
#include "trainer/program/log.h"
#include "trainer/program/memory_report.h"
#include "trainer/program/run_setup.h"
#include "trainer/command_line/options.h"
#include "trainer/data/tokenizer.h"
#include "trainer/step/trainer.h"

// Throws std::runtime_error with one line: bad data or checkpoint, dp pp != the world size,
// fewer layers than stages x chunks, a --layers-per-stage that does not fit, a schedule that
// does not fit the microbatches, or what a later step would fail on (trainer/safety/preflight.h).
// Says on out (nullptr: silent) what it reads that may take a while.
RunSetup prepare_run(const TrainOptions& options, std::FILE* out = nullptr);
// The run's memory plan's inputs (trainer/program/memory_report.h).
PlannedRun planned_run(const RunSetup& setup);

struct RunResult {
  std::vector<StepRecord> steps;     // the steps this run did (after the resumed step, if any)
  std::vector<std::string> samples;  // the decoded samples, in order
  // The program's exit status: 0; after a stop signal, trainer/safety/preemption.h's; 1 when the run
  // stopped because --max-skipped steps in a row were not finite, or because pipedream without
  // vertical sync skipped an update on one stage only (StepResult::stop), with error saying so (one
  // line, the same on every rank).
  int exit_status = 0;
  std::string error;
};

// How the job ends when this rank fails once its communicators exist: its watchdog
// (trainer/safety/watchdog.h, --timeout) finds it stuck, or the step throws on the main thread. Called
// once with the one-line report (a few lines for the watchdog's) and, on the main thread only,
// a function that aborts this rank's communicators in a safe order (comm/groups.h); the handler
// sends the report first and aborts after (trainer/safety/error_channel.h), and never returns. The
// watchdog's thread gets no abort: NCCL's blocking communicators take no call from two threads
// at once, and the main thread may be inside one; the job's end frees them. Empty: the report is
// printed to stderr and the process exits with status 1 (a world of one, nobody to tell).
using FailureHandler =
    std::function<void(const std::string& report, const std::function<void()>& abort_communicators)>;

// "train: error: rank 2 (stage 2, replica 0) failed: <what>": a rank's failure, as reported.
std::string rank_failure_line(const Mesh& mesh, const std::string& what);

// Runs options.steps optimizer steps (fewer when resuming, or when stopped early: a stop signal,
// trainer/safety/preemption.h, or --max-skipped non-finite steps in a row), printing the banner, each
// step's line with the time elapsed and left, the samples and a closing summary line to out
// (nullptr: silent; give it on world rank 0 only). A skipped step is never saved: --save keeps
// the last applied step's checkpoint. Every rank of the world calls it. Throws
// std::runtime_error with one line on bad input. An error once the communicators exist may be
// this rank's alone while its peers wait on it: it goes to on_failure (which does not return),
// or is thrown when there is none; the device memory is left allocated (trainer/program/run.cpp says why).
RunResult run_training(const RunSetup& setup, std::FILE* out, const FailureHandler& on_failure = {});
RunResult run_training(const TrainOptions& options, std::FILE* out);
