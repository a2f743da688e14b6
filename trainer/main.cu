// The train program: parses the options and runs one training run on every rank of the
// mpirun world (pp = world size / dp stages by default; a single process is pp = dp = 1).
// Errors found while setting up, before any rank communicates, are the same on every rank:
// world rank 0 prints the one line and every rank exits with status 1. An error during the
// run may be one rank's alone while the others wait in a collective, so it aborts the world.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "trainer/options.h"
#include "trainer/ranks.h"
#include "trainer/run.h"

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
    setup = prepare_run(options);
  } catch (const std::runtime_error& error) {
    if (out) std::fprintf(stderr, "train: error: %s\n", error.what());
    return 1;
  }
  if (setup.options.print_schedule) {
    if (out) std::printf("%s", schedule_report(setup).c_str());
    return 0;
  }
  try {
    run_training(setup, out);
  } catch (const std::runtime_error& error) {
    if (world.size == 1) {
      std::fprintf(stderr, "train: error: %s\n", error.what());
      return 1;
    }
    // Rank 0 speaks when it failed too; the others give it a moment to, then speak and abort.
    if (world.rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::fprintf(stderr, "train: error: %s (rank %d)\n", error.what(), world.rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int status = train(argc, argv);
  MPI_Finalize();
  return status;
}
