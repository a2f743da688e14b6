// The train program: parses the options and runs one training run in a single process.
// It is launched with mpirun; several ranks (--pp, --dp) are not supported yet, and every
// rank says so and exits instead of waiting for the others.
#include <mpi.h>

#include <cstdio>
#include <stdexcept>

#include "trainer/options.h"
#include "trainer/run.h"

namespace {

int train(int argc, char** argv) {
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const TrainOptions options = parse_train_options(argc, argv);
  if (options.help) {
    std::printf("%s", train_options_help().c_str());
    return 0;
  }
  if (world_size > 1) {
    std::fprintf(stderr, "train: error: multi-rank training (--pp/--dp) is not implemented yet; run 1 process, not %d\n",
                 world_size);
    return 1;
  }
  run_training(options, stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 1;
  try {
    status = train(argc, argv);
  } catch (const std::runtime_error& error) {
    std::fprintf(stderr, "train: error: %s\n", error.what());
  }
  MPI_Finalize();
  return status;
}
