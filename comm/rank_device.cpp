// MPI with threads and a GPU per rank (comm/rank_device.h).
#include "comm/rank_device.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

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

// As nvidia-smi writes it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string uuid_text(const char (&uuid)[16]) {
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(uuid[i]));
    text += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) text += '-';
  }
  return text;
}

}  // namespace

int rank_device(const RankPlace& place) { return place.local_rank % place.visible_devices; }

std::string rank_place_error(const std::vector<RankPlace>& world, const char* program) {
  const std::string error = std::string(program) + ": error: ";
  for (size_t rank = 0; rank < world.size(); ++rank) {
    // Rank 0's error listener (trainer/safety/error_channel.h) calls MPI beside the main thread, and an
    // NCCL that runs over MPI (the CPU build's) calls it from its streams' threads.
    if (world[rank].thread_level < MPI_THREAD_MULTIPLE)
      return error + "MPI gives world rank " + std::to_string(rank) + " thread level " +
             std::to_string(world[rank].thread_level) + ", below MPI_THREAD_MULTIPLE (" +
             std::to_string(MPI_THREAD_MULTIPLE) + "): use an MPI built with thread support";
  }
  for (size_t rank = 0; rank < world.size(); ++rank) {
    const RankPlace& place = world[rank];
    const std::string ranks = counted(place.ranks_on_node, "rank") + " on " + node_name(place.node);
    if (place.visible_devices == 0)
      return error + ranks + " but no GPU for world rank " + std::to_string(rank) +
             " (cudaGetDeviceCount found none): check the driver and CUDA_VISIBLE_DEVICES";
    for (size_t other = 0; other < rank; ++other) {
      const RankPlace& first = world[other];
      if (first.node != place.node || std::memcmp(first.gpu_uuid, place.gpu_uuid, sizeof place.gpu_uuid) != 0) continue;
      const int device = rank_device(place), first_device = rank_device(first);
      const int most = place.visible_devices;
      return error + ranks + " but " + counted(most, "GPU") + " for world rank " + std::to_string(rank) +
             ": it would share " + uuid_text(place.gpu_uuid) + " with world rank " + std::to_string(other) +
             (device == first_device ? " (device " + std::to_string(device) + " of each)"
                                     : " (devices " + std::to_string(device) + " and " + std::to_string(first_device) + ")") +
             ": run at most " + counted(most, "rank") + " per node (mpirun -np " + std::to_string(most) +
             ", or a host file that spreads the ranks over nodes), or give each rank its own GPU (CUDA_VISIBLE_DEVICES "
             "per rank): docs/pipeline.md";
    }
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
  RankPlace own{thread_level, 0, 0, 1, 0, {}};
  MPI_Comm_rank(node, &own.local_rank);
  MPI_Comm_size(node, &own.ranks_on_node);
  MPI_Allreduce(&world_rank, &own.node, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  // Device queries: they open no context, so a rank that is refused has touched no GPU.
  if (cudaGetDeviceCount(&own.visible_devices) != cudaSuccess) own.visible_devices = 0;
  if (own.visible_devices > 0) {
    cudaDeviceProp properties;
    CUDA_CHECK(cudaGetDeviceProperties(&properties, rank_device(own)));
    std::memcpy(own.gpu_uuid, properties.uuid.bytes, sizeof own.gpu_uuid);
  }

  // Nodes may differ (another GPU count, another MPI, other visible devices): every rank sees
  // every rank's view.
  static_assert(std::is_trivially_copyable_v<RankPlace>, "RankPlace travels as bytes");
  std::vector<RankPlace> world(world_size);
  MPI_Allgather(&own, sizeof own, MPI_BYTE, world.data(), sizeof own, MPI_BYTE, MPI_COMM_WORLD);
  const std::string error = rank_place_error(world, program);
  if (!error.empty()) {
    if (world_rank == 0) std::fprintf(stderr, "%s\n", error.c_str());
    MPI_Finalize();
    return false;
  }
  CUDA_CHECK(cudaSetDevice(rank_device(own)));
  return true;
}
