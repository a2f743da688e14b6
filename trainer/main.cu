// The train program: parses the options and runs one training run on every rank of the
// mpirun world (pp = world size / dp stages by default; a single process is pp = dp = 1).
// Each rank first takes its own device (comm/rank_device.h). Errors found while setting up,
// before any rank communicates, are the same on every rank: world rank 0 prints the one line and
// every rank exits with status 1. An error during the run may be one rank's alone while the
// others wait on it in a transfer: it goes to world rank 0, which prints it naming the rank and
// aborts the job (trainer/safety/error_channel.h).
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "comm/rank_device.h"
#include "model/atomic_file.h"
#include "trainer/safety/error_channel.h"
#include "trainer/command_line/options.h"
#include "trainer/safety/preemption.h"
#include "comm/host_exchange.h"
#include "trainer/program/layout_advisor.h"
#include "trainer/program/memory_report.h"
#include "trainer/program/pipedream_report.h"
#include "trainer/program/run.h"
#include "trainer/program/schedule_report.h"

namespace {

int train(int argc, char** argv) {
  const World world = this_world();
  std::FILE* out = world.rank == 0 ? stdout : nullptr;
  RunSetup setup;
  try {
    const TrainOptions options = parse_train_options(argc, argv);
    if (options.help) {
      if (out) std::printf("%s", train_options_help().c_str());
      return 0;
    }
    if (options.print_memory) {
      const PlannedRun run = planned_run(options, options.world > 0 ? options.world : world.size);
      const std::string table = memory_table(run, plan_run_memory(run));
      if (out) std::printf("%s", table.c_str());
      return 0;
    }
    if (options.schedule == "pipedream" && options.print_schedule) {  // its versions and steps
      TrainOptions shown = options;  // with --layers-per-stage auto, the split measured (prepare_run prints it)
      if (options.layers_per_stage_auto) shown.layers_per_stage = prepare_run(options, out).layout.layers_per_stage;
      const std::string report = pipedream_report(shown, world.size);
      if (out) std::printf("%s", report.c_str());
      if (options.trace.empty()) return 0;
      const std::string json = pipedream_timeline_json(shown, world.size);
      if (out == nullptr) return 0;
      write_file_atomically(options.trace, {{json.data(), json.size()}});
      std::printf("wrote the predicted timeline to %s\n", options.trace.c_str());
      return 0;
    }
    if (options.plan_layouts) {
      // On every rank, so that a bad input is an error on every rank.
      const std::string table = plan_layouts(options, {argv + 1, argv + argc}, world.size);
      if (out) std::printf("%s", table.c_str());
      return 0;
    }
    setup = prepare_run(options, out);
    // Before anything is allocated: every rank's plan against the memory it may use (collective).
    if (!setup.options.print_schedule) {
      const DeviceBudget budget = device_budget(setup.options);
      check_memory_fits(planned_run(setup), budget.usable);
      if (out) std::printf("%s on rank 0\n", device_budget_line(budget, setup.options).c_str());
    }
  } catch (const std::runtime_error& error) {
    if (out) std::fprintf(stderr, "train: error: %s\n", error.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // Sizes that pass every check can still ask for more host memory than there is
    // (--seq-len 2000000000): the same on every rank, so it is reported like the rest.
    if (out) std::fprintf(stderr, "train: error: out of host memory while setting up the run: the model or data sizes are too large for this machine\n");
    return 1;
  }
  if (setup.options.print_schedule) {
    if (out == nullptr) return 0;
    std::printf("%s", schedule_report(setup).c_str());
    if (setup.options.trace.empty()) return 0;
    try {
      const std::string json = predicted_timeline_json(setup);
      write_file_atomically(setup.options.trace, {{json.data(), json.size()}});
    } catch (const std::runtime_error& error) {
      std::fprintf(stderr, "train: error: %s\n", error.what());
      return 1;
    }
    std::printf("wrote the predicted timeline to %s\n", setup.options.trace.c_str());
    return 0;
  }
  RunResult result;
  if (world.size == 1) {
    try {
      result = run_training(setup, out);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "train: error: %s\n", error.what());
      return 1;
    }
    if (!result.error.empty()) std::fprintf(stderr, "train: error: %s\n", result.error.c_str());
    return result.exit_status;
  }
  ErrorChannel* channel = open_error_channel();
  const FailureHandler on_failure = [channel](const std::string& report,
                                              const std::function<void()>& abort_communicators) {
    fail_run(channel, report, abort_communicators);
  };
  try {
    result = run_training(setup, out, on_failure);
  } catch (const std::exception& error) {
    // Before the communicators exist (run_training's own failures went to on_failure).
    fail_run(channel, rank_failure_line(setup.mesh, error.what()));
  }
  close_error_channel(channel);
  // Every rank stopped after the same step with the same status (trainer/program/run.h).
  if (out && !result.error.empty()) std::fprintf(stderr, "train: error: %s\n", result.error.c_str());
  return result.exit_status;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before MPI_Init: a launcher forwards SIGTERM to ranks that may still be starting
  // (MPI_Init and device selection take about 0.4 s with 4 ranks on 2 cores, longer on a loaded
  // node). Without the handler the signal ends that rank, mpirun kills the others and no checkpoint
  // is written; with it, a stop requested during set-up stops the run after step 1.
  catch_stop_signals();
  if (!start_rank_on_own_device(&argc, &argv, "train")) return 1;
  const int status = train(argc, argv);
  MPI_Finalize();
  return status;
}
