// Which worlds can run with a GPU per rank, and the one line that says why another cannot
// (comm/rank_device.h): every node needs as many GPUs as it has ranks, and MPI must allow threads.
// Host code only, on tables of what each rank sees; the collective part runs in every MPI program.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/rank_device.h"

namespace {

constexpr int kThreads = MPI_THREAD_MULTIPLE;

// ranks_per_node[i] ranks on node i, which has gpus_per_node[i] GPUs; ranks fill nodes in world-rank order.
std::vector<RankPlace> world_of(const std::vector<int>& ranks_per_node, const std::vector<int>& gpus_per_node) {
  std::vector<RankPlace> world;
  for (size_t node = 0; node < ranks_per_node.size(); ++node)
    for (int r = 0; r < ranks_per_node[node]; ++r) world.push_back({kThreads, ranks_per_node[node], gpus_per_node[node]});
  return world;
}

}  // namespace

TEST(RankDevice, AGpuPerRankOnEveryNodeRuns) {
  EXPECT_EQ(rank_place_error(world_of({4}, {4}), "train"), "");
  EXPECT_EQ(rank_place_error(world_of({4}, {8}), "train"), "");
  EXPECT_EQ(rank_place_error(world_of({2, 2}, {2, 4}), "train"), "");
}

TEST(RankDevice, MoreRanksThanGpusNamesBothCountsAndWhatToDo) {
  EXPECT_EQ(rank_place_error(world_of({4}, {2}), "train"),
            "train: error: 4 ranks on this node but 2 GPUs: run at most 2 ranks per node (mpirun -np 2, or a host "
            "file that spreads the ranks over nodes: docs/pipeline.md)");
  EXPECT_EQ(rank_place_error(world_of({2}, {1}), "mpi_tests"),
            "mpi_tests: error: 2 ranks on this node but 1 GPU: run at most 1 rank per node (mpirun -np 1, or a "
            "host file that spreads the ranks over nodes: docs/pipeline.md)");
}

// World rank 0's node is fine; the short node is named by its first world rank, so that every
// rank, wherever it runs, reaches the same verdict and rank 0 can say where the problem is.
TEST(RankDevice, AShortNodeElsewhereIsNamedByItsFirstRank) {
  EXPECT_EQ(rank_place_error(world_of({2, 3, 4}, {2, 1, 1}), "train"),
            "train: error: 3 ranks on the node of world rank 2 but 1 GPU: run at most 1 rank per node (mpirun -np "
            "1, or a host file that spreads the ranks over nodes: docs/pipeline.md)");
}

TEST(RankDevice, ANodeWithoutGpusSaysSo) {
  EXPECT_EQ(rank_place_error(world_of({4}, {0}), "train"),
            "train: error: 4 ranks on this node but no GPU (cudaGetDeviceCount found none): check the driver and "
            "CUDA_VISIBLE_DEVICES");
}

// Rank 0's error listener (trainer/error_channel.h) calls MPI beside the main thread.
TEST(RankDevice, MpiWithoutThreadSupportIsRefusedBeforeDevicesAreCounted) {
  std::vector<RankPlace> world = world_of({4}, {2});
  world[3].thread_level = MPI_THREAD_SERIALIZED;

  EXPECT_EQ(rank_place_error(world, "train"),
            "train: error: MPI gives world rank 3 thread level " + std::to_string(MPI_THREAD_SERIALIZED) +
                ", below MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                "): use an MPI built with thread support");
}
