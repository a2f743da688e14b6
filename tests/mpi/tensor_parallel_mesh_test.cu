// The mesh's tensor-parallel axis (comm/mesh.h, comm/groups.h, comm/tensor_parallel.h): the
// rank -> (dp, tp, pp) coordinates with tp innermost, the communicators' members, the one-line
// errors for bad sizes, and the all-reduce over the tp ranks alone. Runs under mpirun -np 4,
// where the layouts with tp > 1 are tp 4, dp 2 x tp 2 and tp 2 x pp 2; the groups of
// dp 2 x tp 2 x pp 2 need -np 8 (skipped elsewhere). Every value summed here is a small
// integer, exact in float, so results are compared bitwise.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "comm/nccl_check.cuh"
#include "comm/tensor_parallel.h"
#include "tests/device_buffer.h"

namespace {

const cudaStream_t kStream = nullptr;

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}
int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// The groups of a layout for the length of a test (creation and destruction are collective).
struct Groups {
  Groups(int dp, int tp, int pp) : groups(create_comm_groups(make_world_mesh(dp, tp, pp))) {}
  ~Groups() { destroy_comm_groups(groups); }
  CommGroups groups;
};

template <typename Make>
std::string message_of(Make make) {
  try {
    make();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

struct Coordinates {
  int dp_rank, tp_rank, pp_rank;
};

// Each world rank's coordinates, written out, and world_rank_of's way back.
void expect_coordinates(int dp, int tp, int pp, const std::vector<Coordinates>& expected) {
  const int world = dp * tp * pp;
  for (int rank = 0; rank < world; ++rank) {
    const Mesh mesh = make_mesh(dp, tp, pp, world, rank);
    const Coordinates& c = expected[rank];
    EXPECT_EQ(mesh.dp_rank, c.dp_rank) << "rank " << rank;
    EXPECT_EQ(mesh.tp_rank, c.tp_rank) << "rank " << rank;
    EXPECT_EQ(mesh.pp_rank, c.pp_rank) << "rank " << rank;
    EXPECT_EQ(mesh.previous_stage, c.pp_rank > 0 ? c.pp_rank - 1 : -1) << "rank " << rank;
    EXPECT_EQ(mesh.next_stage, c.pp_rank < pp - 1 ? c.pp_rank + 1 : -1) << "rank " << rank;
    EXPECT_EQ(world_rank_of(mesh, c.dp_rank, c.pp_rank, c.tp_rank), rank);
  }
}

TEST(TensorParallelMesh, DpTwoTpTwoPpTwoPutsTpInnermostThenPpThenDp) {
  expect_coordinates(2, 2, 2,
                     {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}, {1, 0, 0}, {1, 1, 0}, {1, 0, 1}, {1, 1, 1}});
}

TEST(TensorParallelMesh, TpFourIsFourConsecutiveRanksOfOneStage) {
  expect_coordinates(1, 4, 1, {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 3, 0}});
}

TEST(TensorParallelMesh, TpOneIsTheDpByPpLayout) {
  for (int rank = 0; rank < 4; ++rank) {
    const Mesh mesh = make_mesh(2, 2, 4, rank);
    EXPECT_EQ(mesh.tp, 1);
    EXPECT_EQ(mesh.tp_rank, 0);
    EXPECT_EQ(mesh.dp_rank * 2 + mesh.pp_rank, rank);
  }
}

TEST(TensorParallelMesh, PpZeroIsWorldSizeOverDpTimesTp) {
  EXPECT_EQ(make_mesh(2, 2, 0, 8, 0).pp, 2);
  EXPECT_EQ(make_mesh(1, 4, 0, 8, 0).pp, 2);
}

TEST(TensorParallelMesh, BadLayoutsThrowOneLine) {
  EXPECT_EQ(message_of([] { make_mesh(1, 0, 4, 4, 0); }), "--tp 0 must be at least 1");
  EXPECT_EQ(message_of([] { make_mesh(2, 3, 0, 8, 0); }), "--dp 2 x --tp 3 = 6 does not divide the world size 8");
  EXPECT_EQ(message_of([] { make_mesh(2, 2, 3, 8, 0); }),
            "--dp 2 x --tp 2 x --pp 3 = 12 does not equal the world size 8");
}

TEST(TensorParallelMesh, TpMustDivideHeadsHiddenChannelsAndPaddedVocabulary) {
  EXPECT_NO_THROW(check_tensor_parallel_sizes(4, 12, 768, 50304));
  EXPECT_NO_THROW(check_tensor_parallel_sizes(1, 3, 5, 7));
  EXPECT_EQ(message_of([] { check_tensor_parallel_sizes(0, 12, 768, 50304); }), "--tp 0 must be at least 1");
  EXPECT_EQ(message_of([] { check_tensor_parallel_sizes(8, 12, 768, 50304); }),
            "--tp 8 does not divide the 12 attention heads");
  EXPECT_EQ(message_of([] { check_tensor_parallel_sizes(16, 16, 2, 64); }),
            "--tp 16 does not divide the MLP's 4 C = 8 hidden channels");
  EXPECT_EQ(message_of([] { check_tensor_parallel_sizes(2, 12, 768, 50257); }),
            "--tp 2 does not divide the padded vocabulary of 50257 rows");
}

// A group's members, as a one-hot vector of world ranks summed over the group.
std::vector<int> members_of(ncclComm_t comm) {
  std::vector<int> one_hot(world_size(), 0);
  one_hot[world_rank()] = 1;
  DeviceBuffer<int> buffer(one_hot);
  NCCL_CHECK(ncclAllReduce(buffer.data(), buffer.data(), one_hot.size(), ncclInt32, ncclSum, comm, kStream));
  return buffer.to_host();
}

// The one-hot of the listed world ranks.
std::vector<int> ranks(std::initializer_list<int> members) {
  std::vector<int> one_hot(world_size(), 0);
  for (int r : members) one_hot[r] = 1;
  return one_hot;
}

void expect_group(ncclComm_t comm, int rank, const std::vector<int>& members, const char* name) {
  ASSERT_NE(comm, nullptr) << name;
  int count = 0, user_rank = 0;
  NCCL_CHECK(ncclCommCount(comm, &count));
  NCCL_CHECK(ncclCommUserRank(comm, &user_rank));
  int size = 0;
  for (int m : members) size += m;
  EXPECT_EQ(count, size) << name;
  EXPECT_EQ(user_rank, rank) << name;
  EXPECT_EQ(members_of(comm), members) << name;
}

TEST(TensorParallelMesh, GroupsOfFourRanks) {
  if (world_size() != 4) GTEST_SKIP() << "written for 4 ranks";
  const int r = world_rank();
  {  // tp 4: one tensor-parallel group of all; every other group is the rank alone.
    Groups g(1, 4, 1);
    expect_group(g.groups.tensor_parallel, r, ranks({0, 1, 2, 3}), "tensor_parallel");
    expect_group(g.groups.pipeline, 0, ranks({r}), "pipeline");
    expect_group(g.groups.data_parallel, 0, ranks({r}), "data_parallel");
    EXPECT_EQ(g.groups.embedding, nullptr);
  }
  {  // dp 2 x tp 2: shards {0, 1} and {2, 3}; replicas of each shard {0, 2} and {1, 3}.
    Groups g(2, 2, 1);
    expect_group(g.groups.tensor_parallel, r % 2, r < 2 ? ranks({0, 1}) : ranks({2, 3}), "tensor_parallel");
    expect_group(g.groups.data_parallel, r / 2, r % 2 == 0 ? ranks({0, 2}) : ranks({1, 3}), "data_parallel");
    expect_group(g.groups.pipeline, 0, ranks({r}), "pipeline");
  }
  {  // tp 2 x pp 2: stage 0 = {0, 1}, stage 1 = {2, 3}; shard 0's pipeline {0, 2}, shard 1's {1, 3}.
    Groups g(1, 2, 2);
    const std::vector<int> pipeline = r % 2 == 0 ? ranks({0, 2}) : ranks({1, 3});
    expect_group(g.groups.tensor_parallel, r % 2, r < 2 ? ranks({0, 1}) : ranks({2, 3}), "tensor_parallel");
    expect_group(g.groups.pipeline, r / 2, pipeline, "pipeline");
    expect_group(g.groups.embedding, r / 2, pipeline, "embedding");
    expect_group(g.groups.data_parallel, 0, ranks({r}), "data_parallel");
  }
  {  // tp 1: no tensor-parallel communicator.
    Groups g(2, 1, 2);
    EXPECT_EQ(g.groups.tensor_parallel, nullptr);
  }
}

TEST(TensorParallelMesh, GroupsOfDpTwoTpTwoPpTwo) {
  if (world_size() != 8) GTEST_SKIP() << "needs mpirun -np 8";
  const int r = world_rank();
  const int tp_rank = r % 2, pp_rank = r / 2 % 2, dp_rank = r / 4;
  Groups g(2, 2, 2);
  const int first = r - tp_rank;  // this stage's shard 0
  expect_group(g.groups.tensor_parallel, tp_rank, ranks({first, first + 1}), "tensor_parallel");
  const int replica_start = dp_rank * 4 + tp_rank;  // this shard's stage 0 in this replica
  const std::vector<int> pipeline = ranks({replica_start, replica_start + 2});
  expect_group(g.groups.pipeline, pp_rank, pipeline, "pipeline");
  expect_group(g.groups.embedding, pp_rank, pipeline, "embedding");
  const int stage_shard = pp_rank * 2 + tp_rank;  // this shard of this stage in replica 0
  expect_group(g.groups.data_parallel, dp_rank, ranks({stage_shard, stage_shard + 4}), "data_parallel");
}

// Rank r's values: (r + 1) (i + 1), exact in float, as are their sums.
std::vector<float> values_of(int rank, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = float((rank + 1) * (int(i) + 1));
  return values;
}

TEST(TensorParallelCollectives, SumAndMaxJoinOnlyTheStagesTpRanks) {
  if (world_size() != 4) GTEST_SKIP() << "written for 4 ranks";
  const size_t n = 37;
  for (int tp : {1, 2, 4}) {
    Groups g(4 / tp, tp, 1);
    const Mesh& mesh = g.groups.mesh;
    DeviceBuffer<float> sum(values_of(mesh.world_rank, n)), max(values_of(mesh.world_rank, n));
    allreduce_tensor_parallel(g.groups, sum.data(), n, ncclFloat32, ncclSum, kStream);
    allreduce_tensor_parallel(g.groups, max.data(), n, ncclFloat32, ncclMax, kStream);
    const int first = mesh.world_rank - mesh.tp_rank;
    std::vector<float> expected_sum(n, 0.0f);
    for (int t = 0; t < tp; ++t)
      for (size_t i = 0; i < n; ++i) expected_sum[i] += values_of(first + t, n)[i];
    EXPECT_EQ(sum.to_host(), expected_sum) << "tp " << tp;
    EXPECT_EQ(max.to_host(), values_of(first + tp - 1, n)) << "tp " << tp;
  }
}

}  // namespace
