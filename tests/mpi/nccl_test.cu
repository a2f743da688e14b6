// NCCL as the project uses it, checked against plain loops: communicators bootstrapped
// over MPI, send/recv and groups, collectives and splits. Run under mpirun -np 4. (That the CPU
// build's NCCL lets a waiting rank sleep is tests/cpu/mpi/nccl_wait_test.cu's.)
#include <cuda_bf16.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/nccl_check.cuh"
#include "tests/device_buffer.h"

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// A communicator of every world rank: rank 0 makes the id and broadcasts it over MPI.
struct WorldComm {
  WorldComm() {
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  }
  ~WorldComm() { ncclCommDestroy(comm); }
  int rank = world_rank();
  int size = world_size();
  ncclComm_t comm = nullptr;
};

// The input of rank r at index i: mixed signs and magnitudes, known to every rank.
double input(int r, size_t i) { return std::sin(1.7 * r + 0.37 * static_cast<double>(i)) * (1 + r); }

// An exact label of (rank, index, message) for data that is only moved, never added.
float label(int r, size_t i, int message = 0) { return static_cast<float>(r * 100000 + i) + 0.5f * message; }

template <typename T>
std::vector<T> inputs_of(int r, size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(input(r, i));
  return values;
}

std::vector<__nv_bfloat16> bf16_inputs_of(int r, size_t count) {
  std::vector<__nv_bfloat16> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = __float2bfloat16(static_cast<float>(input(r, i)));
  return values;
}

// Checks an all-reduce sum against the exact sum (in double) of every rank's inputs as
// converted to T. Each of the size - 1 additions rounds by at most unit_roundoff relative
// to a partial sum no larger than sum|x|, so the error is below (size - 1) * u * sum|x|
// plus second-order terms; the bound size * u * sum|x| covers those.
template <typename T, typename ToDouble>
void expect_sums(const std::vector<T>& result, const std::vector<std::vector<T>>& inputs, double unit_roundoff,
                 ToDouble to_double) {
  for (size_t i = 0; i < result.size(); ++i) {
    double sum = 0.0, sum_abs = 0.0;
    for (const std::vector<T>& in : inputs) {
      sum += to_double(in[i]);
      sum_abs += std::fabs(to_double(in[i]));
    }
    ASSERT_NEAR(to_double(result[i]), sum, inputs.size() * unit_roundoff * sum_abs) << "at " << i;
  }
}

constexpr double float_roundoff = 0x1p-24, double_roundoff = 0x1p-53, bf16_roundoff = 0x1p-8;
// Above MPI's eager limits, so a send completes only once its receive is posted.
constexpr size_t large_count = 100000;

}  // namespace

TEST(Nccl, WorldCommunicatorHasEveryRankInWorldOrder) {
  WorldComm world;
  int count = 0, rank = -1;
  NCCL_CHECK(ncclCommCount(world.comm, &count));
  NCCL_CHECK(ncclCommUserRank(world.comm, &rank));
  EXPECT_EQ(count, world.size);
  EXPECT_EQ(rank, world.rank);
}

// Even ranks send then receive, odd ranks receive then send: a ring without groups.
TEST(Nccl, SendRecvAroundARing) {
  WorldComm world;
  ASSERT_EQ(world.size % 2, 0) << "the even/odd ordering needs an even number of ranks";
  const int next = (world.rank + 1) % world.size, previous = (world.rank + world.size - 1) % world.size;
  std::vector<float> mine(large_count);
  for (size_t i = 0; i < large_count; ++i) mine[i] = label(world.rank, i);
  DeviceBuffer<float> sent(mine), received(large_count);
  if (world.rank % 2 == 0) {
    NCCL_CHECK(ncclSend(sent.data(), large_count, ncclFloat32, next, world.comm, nullptr));
    NCCL_CHECK(ncclRecv(received.data(), large_count, ncclFloat32, previous, world.comm, nullptr));
  } else {
    NCCL_CHECK(ncclRecv(received.data(), large_count, ncclFloat32, previous, world.comm, nullptr));
    NCCL_CHECK(ncclSend(sent.data(), large_count, ncclFloat32, next, world.comm, nullptr));
  }
  const std::vector<float> got = received.to_host();
  for (size_t i = 0; i < large_count; ++i) ASSERT_EQ(got[i], label(previous, i)) << "at " << i;
}

// Every rank sends to both neighbours before receiving from either: only the group makes
// this safe, since no send can complete before its receive is posted.
TEST(Nccl, GroupedExchangeWithBothNeighboursDoesNotDeadlock) {
  WorldComm world;
  ASSERT_GE(world.size, 3) << "both neighbours must be distinct ranks";
  const int right = (world.rank + 1) % world.size, left = (world.rank + world.size - 1) % world.size;
  constexpr int to_left = 0, to_right = 1;  // the message index in the labels
  std::vector<float> for_left(large_count), for_right(large_count);
  for (size_t i = 0; i < large_count; ++i) {
    for_left[i] = label(world.rank, i, to_left);
    for_right[i] = label(world.rank, i, to_right);
  }
  DeviceBuffer<float> send_left(for_left), send_right(for_right), from_left(large_count), from_right(large_count);
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(send_left.data(), large_count, ncclFloat32, left, world.comm, nullptr));
  NCCL_CHECK(ncclSend(send_right.data(), large_count, ncclFloat32, right, world.comm, nullptr));
  NCCL_CHECK(ncclGroupStart());  // nested: still one group
  NCCL_CHECK(ncclRecv(from_left.data(), large_count, ncclFloat32, left, world.comm, nullptr));
  NCCL_CHECK(ncclRecv(from_right.data(), large_count, ncclFloat32, right, world.comm, nullptr));
  NCCL_CHECK(ncclGroupEnd());
  NCCL_CHECK(ncclGroupEnd());
  const std::vector<float> got_left = from_left.to_host(), got_right = from_right.to_host();
  for (size_t i = 0; i < large_count; ++i) {
    ASSERT_EQ(got_left[i], label(left, i, to_right)) << "at " << i;
    ASSERT_EQ(got_right[i], label(right, i, to_left)) << "at " << i;
  }
}

TEST(Nccl, AllReduceSumFloat) {
  WorldComm world;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < world.size; ++r) inputs.push_back(inputs_of<float>(r, large_count));
  DeviceBuffer<float> in(inputs[world.rank]), out(large_count);
  NCCL_CHECK(ncclAllReduce(in.data(), out.data(), large_count, ncclFloat32, ncclSum, world.comm, nullptr));
  expect_sums(out.to_host(), inputs, float_roundoff, [](float x) { return double(x); });
}

TEST(Nccl, AllReduceSumDoubleInPlace) {
  WorldComm world;
  std::vector<std::vector<double>> inputs;
  for (int r = 0; r < world.size; ++r) inputs.push_back(inputs_of<double>(r, large_count));
  DeviceBuffer<double> data(inputs[world.rank]);
  NCCL_CHECK(ncclAllReduce(data.data(), data.data(), large_count, ncclFloat64, ncclSum, world.comm, nullptr));
  expect_sums(data.to_host(), inputs, double_roundoff, [](double x) { return x; });
}

// bf16 partial sums are rounded to bf16 at each step; every rank must get the same bits,
// or data-parallel replicas would drift apart.
TEST(Nccl, AllReduceSumBf16SameOnEveryRank) {
  WorldComm world;
  std::vector<std::vector<__nv_bfloat16>> inputs;
  for (int r = 0; r < world.size; ++r) inputs.push_back(bf16_inputs_of(r, large_count));
  DeviceBuffer<__nv_bfloat16> in(inputs[world.rank]), out(large_count);
  NCCL_CHECK(ncclAllReduce(in.data(), out.data(), large_count, ncclBfloat16, ncclSum, world.comm, nullptr));
  const std::vector<__nv_bfloat16> result = out.to_host();
  expect_sums(result, inputs, bf16_roundoff, [](__nv_bfloat16 x) { return double(__bfloat162float(x)); });
  std::vector<__nv_bfloat16> rank0_result(result);
  MPI_Bcast(rank0_result.data(), large_count * sizeof(__nv_bfloat16), MPI_BYTE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(rank0_result.data(), result.data(), large_count * sizeof(__nv_bfloat16)), 0);
}

TEST(Nccl, AllReduceMaxFloatIsExact) {
  WorldComm world;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < world.size; ++r) inputs.push_back(inputs_of<float>(r, large_count));
  DeviceBuffer<float> in(inputs[world.rank]), out(large_count);
  NCCL_CHECK(ncclAllReduce(in.data(), out.data(), large_count, ncclFloat32, ncclMax, world.comm, nullptr));
  const std::vector<float> got = out.to_host();
  for (size_t i = 0; i < large_count; ++i) {
    float expected = inputs[0][i];
    for (const std::vector<float>& values : inputs) expected = std::max(expected, values[i]);
    ASSERT_EQ(got[i], expected) << "at " << i;
  }
}

// Rank r gets row r of the sum of every rank's (size, count) input.
TEST(Nccl, ReduceScatterSumFloat) {
  WorldComm world;
  constexpr size_t count = 10000;
  std::vector<std::vector<float>> inputs;  // per rank: (size, count)
  for (int r = 0; r < world.size; ++r) inputs.push_back(inputs_of<float>(r, world.size * count));
  DeviceBuffer<float> in(inputs[world.rank]), out(count);
  NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), count, ncclFloat32, ncclSum, world.comm, nullptr));
  std::vector<std::vector<float>> my_rows;  // per rank: its row world.rank
  for (const std::vector<float>& values : inputs)
    my_rows.emplace_back(values.begin() + world.rank * count, values.begin() + (world.rank + 1) * count);
  expect_sums(out.to_host(), my_rows, float_roundoff, [](float x) { return double(x); });
}

TEST(Nccl, AllGatherPlacesRankRAtRowR) {
  WorldComm world;
  constexpr size_t count = 10000;
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = label(world.rank, i);
  DeviceBuffer<float> in(mine), out(world.size * count);  // out: (size, count)
  NCCL_CHECK(ncclAllGather(in.data(), out.data(), count, ncclFloat32, world.comm, nullptr));
  const std::vector<float> got = out.to_host();
  for (int r = 0; r < world.size; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[r * count + i], label(r, i)) << "row " << r << " at " << i;
}

TEST(Nccl, BroadcastCopiesTheRootsBuffer) {
  WorldComm world;
  const int root = world.size - 1;
  std::vector<float> mine(large_count);
  for (size_t i = 0; i < large_count; ++i) mine[i] = label(world.rank, i);
  DeviceBuffer<float> in(mine), out(large_count);
  NCCL_CHECK(ncclBroadcast(in.data(), out.data(), large_count, ncclFloat32, root, world.comm, nullptr));
  const std::vector<float> got = out.to_host();
  for (size_t i = 0; i < large_count; ++i) ASSERT_EQ(got[i], label(root, i)) << "at " << i;
}

// Splits 4 ranks into two pairs by color = group(rank), and checks that each pair has its
// members in world order and sums only its own members' ranks.
void expect_pairs(int (*group)(int), int (*rank_in_group)(int)) {
  WorldComm world;
  ASSERT_EQ(world.size, 4) << "the pairs are written for 4 ranks";
  ncclComm_t pair = nullptr;
  NCCL_CHECK(ncclCommSplit(world.comm, group(world.rank), world.rank, &pair, nullptr));
  ASSERT_NE(pair, nullptr);
  int count = 0, rank = -1;
  NCCL_CHECK(ncclCommCount(pair, &count));
  NCCL_CHECK(ncclCommUserRank(pair, &rank));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(rank, rank_in_group(world.rank));
  int expected_sum = 0;
  for (int r = 0; r < world.size; ++r)
    if (group(r) == group(world.rank)) expected_sum += r;
  DeviceBuffer<int32_t> value(std::vector<int32_t>{world.rank});
  NCCL_CHECK(ncclAllReduce(value.data(), value.data(), 1, ncclInt32, ncclSum, pair, nullptr));
  EXPECT_EQ(value.to_host()[0], expected_sum);
  NCCL_CHECK(ncclCommDestroy(pair));
}

TEST(Nccl, SplitIntoNeighbouringPairs) {  // {0, 1}, {2, 3}
  expect_pairs([](int r) { return r / 2; }, [](int r) { return r % 2; });
}

TEST(Nccl, SplitIntoStridedPairs) {  // {0, 2}, {1, 3}
  expect_pairs([](int r) { return r % 2; }, [](int r) { return r / 2; });
}

TEST(Nccl, SplitWithNoColorGivesNullComm) {
  WorldComm world;
  const bool member = world.rank < 2;
  ncclComm_t part = nullptr;
  NCCL_CHECK(ncclCommSplit(world.comm, member ? 0 : NCCL_SPLIT_NOCOLOR, world.rank, &part, nullptr));
  if (!member) {
    EXPECT_EQ(part, nullptr);
    return;
  }
  ASSERT_NE(part, nullptr);
  int count = 0;
  NCCL_CHECK(ncclCommCount(part, &count));
  EXPECT_EQ(count, 2);
  NCCL_CHECK(ncclCommDestroy(part));
}

// Each group's first rank makes its id; an MPI all-gather hands every rank its leader's id.
TEST(Nccl, InitRankWithOneIdPerGroupFormsTheGroups) {
  const int rank = world_rank(), size = world_size();
  ASSERT_EQ(size, 4) << "the groups are written for 4 ranks";
  const int leader = rank < 2 ? 0 : 2;
  ncclUniqueId mine;
  std::memset(&mine, 0, sizeof(mine));
  if (rank == leader) NCCL_CHECK(ncclGetUniqueId(&mine));
  ncclUniqueId ids[4];  // per world rank
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, ids, sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
  ncclComm_t group = nullptr;
  NCCL_CHECK(ncclCommInitRank(&group, 2, ids[leader], rank - leader));
  int count = 0, group_rank = -1;
  NCCL_CHECK(ncclCommCount(group, &count));
  NCCL_CHECK(ncclCommUserRank(group, &group_rank));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(group_rank, rank - leader);
  DeviceBuffer<int32_t> value(std::vector<int32_t>{rank});
  NCCL_CHECK(ncclAllReduce(value.data(), value.data(), 1, ncclInt32, ncclSum, group, nullptr));
  EXPECT_EQ(value.to_host()[0], 2 * leader + 1);  // leader + (leader + 1)
  NCCL_CHECK(ncclCommDestroy(group));
}
