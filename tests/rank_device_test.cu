// Which worlds can run with a GPU per rank, and the one line that says why another cannot
// (comm/rank_device.h): each rank selects device = node-local rank modulo the devices it sees, no
// two ranks of a node may end up on one GPU (compared by UUID), every rank must see a GPU, and MPI
// must allow threads. Host code only, on tables of what each rank sees; the collective part runs
// in every MPI program.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/rank_device.h"

namespace {

constexpr int kThreads = MPI_THREAD_MULTIPLE;

// A GPU's UUID: the node's first world rank and the GPU's index on the node, byte by byte.
void set_uuid(RankPlace& place, int physical_gpu) {
  for (int i = 0; i < 16; ++i) place.gpu_uuid[i] = 0;
  place.gpu_uuid[0] = char(place.node);
  place.gpu_uuid[1] = char(physical_gpu);
}

// ranks_per_node[i] ranks on node i, each seeing all of its gpus_per_node[i] GPUs (mpirun, Slurm's
// default); ranks fill nodes in world-rank order.
std::vector<RankPlace> all_gpus_visible(const std::vector<int>& ranks_per_node, const std::vector<int>& gpus_per_node) {
  std::vector<RankPlace> world;
  for (size_t node = 0; node < ranks_per_node.size(); ++node) {
    const int first = int(world.size());
    for (int r = 0; r < ranks_per_node[node]; ++r) {
      RankPlace place{kThreads, first, r, ranks_per_node[node], gpus_per_node[node], {}};
      if (place.visible_devices > 0) set_uuid(place, rank_device(place));
      world.push_back(place);
    }
  }
  return world;
}

// One node whose rank r sees one GPU, the node's physical_gpus[r] (CUDA_VISIBLE_DEVICES per rank).
std::vector<RankPlace> one_gpu_each(const std::vector<int>& physical_gpus) {
  std::vector<RankPlace> world;
  for (size_t r = 0; r < physical_gpus.size(); ++r) {
    RankPlace place{kThreads, 0, int(r), int(physical_gpus.size()), 1, {}};
    set_uuid(place, physical_gpus[r]);
    world.push_back(place);
  }
  return world;
}

}  // namespace

TEST(RankDevice, EachRankSelectsItsLocalRankModuloTheGpusItSees) {
  EXPECT_EQ(rank_device({kThreads, 0, 3, 4, 8, {}}), 3);
  EXPECT_EQ(rank_device({kThreads, 0, 3, 4, 1, {}}), 0);
  EXPECT_EQ(rank_device({kThreads, 0, 5, 8, 4, {}}), 1);
}

TEST(RankDevice, AGpuPerRankOnEveryNodeRuns) {
  EXPECT_EQ(rank_place_error(all_gpus_visible({4}, {4}), "train"), "");
  EXPECT_EQ(rank_place_error(all_gpus_visible({4}, {8}), "train"), "");
  EXPECT_EQ(rank_place_error(all_gpus_visible({2, 2}, {2, 4}), "train"), "");
}

TEST(RankDevice, OneVisibleGpuPerRankRuns) {
  EXPECT_EQ(rank_place_error(one_gpu_each({0, 1, 2, 3}), "train"), "");
  EXPECT_EQ(rank_place_error(one_gpu_each({3, 1, 7, 0}), "train"), "");
}

// The same GPU index on two nodes is two GPUs.
TEST(RankDevice, OneGpuIndexOnTwoNodesIsTwoGpus) {
  std::vector<RankPlace> world = all_gpus_visible({1, 1}, {1, 1});
  world[1].gpu_uuid[0] = world[0].gpu_uuid[0];
  EXPECT_EQ(rank_place_error(world, "train"), "");
}

TEST(RankDevice, MoreRanksThanGpusNamesBothRanksTheGpuAndWhatToDo) {
  EXPECT_EQ(rank_place_error(all_gpus_visible({4}, {2}), "train"),
            "train: error: 4 ranks on this node but 2 GPUs for world rank 2: it would share "
            "GPU-00000000-0000-0000-0000-000000000000 with world rank 0 (device 0 of each): run at most 2 ranks per "
            "node (mpirun -np 2, or a host file that spreads the ranks over nodes), or give each rank its own GPU "
            "(CUDA_VISIBLE_DEVICES per rank): docs/pipeline.md");
}

TEST(RankDevice, TheSameVisibleGpuForTwoRanksNamesBoth) {
  EXPECT_EQ(rank_place_error(one_gpu_each({0, 1, 1, 2}), "mpi_tests"),
            "mpi_tests: error: 4 ranks on this node but 1 GPU for world rank 2: it would share "
            "GPU-00010000-0000-0000-0000-000000000000 with world rank 1 (device 0 of each): run at most 1 rank per "
            "node (mpirun -np 1, or a host file that spreads the ranks over nodes), or give each rank its own GPU "
            "(CUDA_VISIBLE_DEVICES per rank): docs/pipeline.md");
}

// World rank 0's node is fine; the short node is named by its first world rank, so that every
// rank, wherever it runs, reaches the same verdict and rank 0 can say where the problem is.
TEST(RankDevice, AShortNodeElsewhereIsNamedByItsFirstRank) {
  EXPECT_EQ(rank_place_error(all_gpus_visible({2, 3, 4}, {2, 2, 1}), "train"),
            "train: error: 3 ranks on the node of world rank 2 but 2 GPUs for world rank 4: it would share "
            "GPU-02000000-0000-0000-0000-000000000000 with world rank 2 (device 0 of each): run at most 2 ranks per "
            "node (mpirun -np 2, or a host file that spreads the ranks over nodes), or give each rank its own GPU "
            "(CUDA_VISIBLE_DEVICES per rank): docs/pipeline.md");
}

TEST(RankDevice, ARankWithoutGpusSaysSo) {
  EXPECT_EQ(rank_place_error(all_gpus_visible({4}, {0}), "train"),
            "train: error: 4 ranks on this node but no GPU for world rank 0 (cudaGetDeviceCount found none): check "
            "the driver and CUDA_VISIBLE_DEVICES");
}

// Rank 0's error listener (trainer/safety/error_channel.h) calls MPI beside the main thread.
TEST(RankDevice, MpiWithoutThreadSupportIsRefusedBeforeDevicesAreCounted) {
  std::vector<RankPlace> world = all_gpus_visible({4}, {2});
  world[3].thread_level = MPI_THREAD_SERIALIZED;

  EXPECT_EQ(rank_place_error(world, "train"),
            "train: error: MPI gives world rank 3 thread level " + std::to_string(MPI_THREAD_SERIALIZED) +
                ", below MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                "): use an MPI built with thread support");
}
