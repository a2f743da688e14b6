// MPI with threads and a device per rank (comm/rank_device.h).
#include "comm/rank_device.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>

#include "kernels/cuda_check.cuh"

namespace {

// "this node" for world rank 0's node, else the node of its first rank.
std::string node_name(int first_rank_of_node) {
  return first_rank_of_node == 0 ? "this node" : "the node of world rank " + std::to_string(first_rank_of_node);
}

// "1 GPU", "2 GPUs".
std::string counted(int count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

}  // namespace

std::string rank_place_error(const std::vector<RankPlace>& world, const char* program) {
  const std::string error = std::string(program) + ": error: ";
  for (size_t rank = 0; rank < world.size(); ++rank) {
    // Rank 0's error listener (trainer/error_channel.h) calls MPI beside the main thread, and an
    // NCCL that runs over MPI (the CPU build's) calls it from its streams' threads.
    if (world[rank].thread_level < MPI_THREAD_MULTIPLE)
      return error + "MPI gives world rank " + std::to_string(rank) + " thread level " +
             std::to_string(world[rank].thread_level) + ", below MPI_THREAD_MULTIPLE (" +
             std::to_string(MPI_THREAD_MULTIPLE) + "): use an MPI built with thread support";
  }
  for (size_t rank = 0; rank < world.size(); ++rank) {
    const RankPlace& place = world[rank];
    if (place.ranks_on_node <= place.devices_on_node) continue;
    const std::string ranks = counted(place.ranks_on_node, "rank") + " on " + node_name(int(rank));
    if (place.devices_on_node == 0)
      return error + ranks + " but no GPU (cudaGetDeviceCount found none): check the driver and CUDA_VISIBLE_DEVICES";
    const int most = place.devices_on_node;
    return error + ranks + " but " + counted(most, "GPU") + ": run at most " + counted(most, "rank") +
           " per node (mpirun -np " + std::to_string(most) +
           ", or a host file that spreads the ranks over nodes: docs/pipeline.md)";
  }
  return "";
}

bool start_rank_on_own_device(int* argc, char*** argv, const char* program) {
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  // Keyed by world rank, so a node's local ranks follow world-rank order.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  int local_rank = 0;
  RankPlace own{thread_level, 1, 0};
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &own.ranks_on_node);
  MPI_Comm_free(&node);
  if (cudaGetDeviceCount(&own.devices_on_node) != cudaSuccess) own.devices_on_node = 0;

  // Nodes may differ (another GPU count, another MPI): every rank sees every rank's view.
  static_assert(sizeof(RankPlace) == 3 * sizeof(int), "RankPlace travels as three ints");
  std::vector<RankPlace> world(world_size);
  MPI_Allgather(&own, 3, MPI_INT, world.data(), 3, MPI_INT, MPI_COMM_WORLD);
  const std::string error = rank_place_error(world, program);
  if (!error.empty()) {
    if (world_rank == 0) std::fprintf(stderr, "%s\n", error.c_str());
    MPI_Finalize();
    return false;
  }
  CUDA_CHECK(cudaSetDevice(local_rank));
  return true;
}
