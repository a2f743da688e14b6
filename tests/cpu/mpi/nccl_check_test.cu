// CUDA_CPU_NCCL_CHECK (cpu/nccl/nccl_call_matching.h): calls that NCCL would pair but that do not match
// fail on both ranks with a message naming both calls, instead of hanging or exchanging
// garbage; calls that match run as without the check, however the ranks group them. As in
// NCCL, the failure is the communicator's asynchronous error, and every later call on it fails
// with the message. CPU build only (cpu_mpi_tests, under mpirun -np 4): the check is the CPU
// build's.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <string>
#include <utility>
#include <vector>

#include "comm/nccl_check.cuh"
#include "cpu/runtime/settings.h"
#include "kernels/cuda_check.cuh"
#include "tests/cpu/mpi/world_communicator.h"
#include "tests/device_buffer.h"

namespace {

// The world's communicator and, split from it, pairs (0, 1) and (2, 3), with the check on.
class NcclCheck : public testing::Test {
 protected:
  void SetUp() override {
    cpu::settings().nccl_check = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(size, 4) << "written for mpirun -np 4";
    world_ = world_communicator();
    NCCL_CHECK(ncclCommSplit(world_, world_rank_ / 2, world_rank_, &pair_, nullptr));
    CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaStreamDestroy(stream_));
    NCCL_CHECK(ncclCommDestroy(pair_));
    NCCL_CHECK(ncclCommDestroy(world_));
    cpu::settings().nccl_check = false;
  }
  bool even() const { return world_rank_ % 2 == 0; }

  // The communicator's asynchronous error once the stream is done, and the message a call on it
  // then fails with ("" when none).
  std::pair<ncclResult_t, std::string> failure(ncclComm_t comm) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess) return {async, ""};
    DeviceBuffer<float> probe(1);
    EXPECT_EQ(ncclAllReduce(probe.data(), probe.data(), 1, ncclFloat32, ncclSum, comm, stream_), async);
    return {async, ncclGetLastError(comm)};
  }

  int world_rank_ = 0;
  ncclComm_t world_ = nullptr, pair_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclCheck, MatchingCallsRunAsWithoutTheCheck) {
  DeviceBuffer<float> values(std::vector<float>(8, float(world_rank_ + 1))), gathered(32), mine(8), from_next(8),
      from_previous(8);
  CUDA_CHECK(cudaMemcpy(mine.data(), values.data(), 8 * sizeof(float), cudaMemcpyDeviceToDevice));
  NCCL_CHECK(ncclAllReduce(values.data(), values.data(), 8, ncclFloat32, ncclSum, world_, stream_));
  NCCL_CHECK(ncclAllGather(mine.data(), gathered.data(), 8, ncclFloat32, world_, stream_));
  // 1F1B's crossing: each rank sends to both neighbours and receives from both in one group.
  const int next = (world_rank_ + 1) % 4, previous = (world_rank_ + 3) % 4;
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(mine.data(), 8, ncclFloat32, next, world_, stream_));
  NCCL_CHECK(ncclSend(mine.data(), 8, ncclFloat32, previous, world_, stream_));
  NCCL_CHECK(ncclRecv(from_next.data(), 8, ncclFloat32, next, world_, stream_));
  NCCL_CHECK(ncclRecv(from_previous.data(), 8, ncclFloat32, previous, world_, stream_));
  NCCL_CHECK(ncclGroupEnd());
  EXPECT_EQ(failure(world_).first, ncclSuccess);
  EXPECT_EQ(values.to_host(), std::vector<float>(8, 1 + 2 + 3 + 4));
  EXPECT_EQ(from_next.to_host(), std::vector<float>(8, float(next + 1)));
  EXPECT_EQ(from_previous.to_host(), std::vector<float>(8, float(previous + 1)));
  const std::vector<float> all = gathered.to_host();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(all[r * 8], float(r + 1)) << "row " << r;
}

// Even ranks reduce 8 values, odd ranks 16: both ranks of each pair fail, naming both calls, and
// nothing is exchanged.
TEST_F(NcclCheck, MismatchedCountFailsOnBothRanksNamingBothCalls) {
  DeviceBuffer<float> values(std::vector<float>(16, float(world_rank_ + 1)));
  NCCL_CHECK(ncclAllReduce(values.data(), values.data(), even() ? 8 : 16, ncclFloat32, ncclSum, pair_, stream_));
  const auto [error, message] = failure(pair_);
  EXPECT_EQ(error, ncclInvalidUsage);
  const std::string expected = even() ? "CUDA_CPU_NCCL_CHECK: rank 0's ncclAllReduce #1 (count 8, ncclFloat32, "
                                        "ncclSum) does not match rank 1's ncclAllReduce #1 (count 16, ncclFloat32, "
                                        "ncclSum)"
                                      : "CUDA_CPU_NCCL_CHECK: rank 1's ncclAllReduce #1 (count 16, ncclFloat32, "
                                        "ncclSum) does not match rank 0's ncclAllReduce #1 (count 8, ncclFloat32, "
                                        "ncclSum)";
  EXPECT_NE(message.find(expected), std::string::npos) << message;
  EXPECT_EQ(values.to_host(), std::vector<float>(16, float(world_rank_ + 1)));
}

TEST_F(NcclCheck, SendAndReceiveOfDifferentTypesFailOnBothRanks) {
  DeviceBuffer<float> buffer(8);
  const int peer = even() ? 1 : 0;
  if (even()) NCCL_CHECK(ncclSend(buffer.data(), 8, ncclFloat32, peer, pair_, stream_));
  else NCCL_CHECK(ncclRecv(buffer.data(), 8, ncclInt32, peer, pair_, stream_));
  const auto [error, message] = failure(pair_);
  EXPECT_EQ(error, ncclInvalidUsage);
  EXPECT_NE(message.find("ncclSend #1 (to rank 1, count 8, ncclFloat32)"), std::string::npos) << message;
  EXPECT_NE(message.find("ncclRecv #1 (from rank 0, count 8, ncclInt32)"), std::string::npos) << message;
}

// One rank broadcasts from root 0, the other from root 1.
TEST_F(NcclCheck, BroadcastsFromDifferentRootsFailOnBothRanks) {
  DeviceBuffer<float> buffer(8);
  NCCL_CHECK(ncclBroadcast(buffer.data(), buffer.data(), 8, ncclFloat32, even() ? 0 : 1, pair_, stream_));
  const auto [error, message] = failure(pair_);
  EXPECT_EQ(error, ncclInvalidUsage);
  EXPECT_NE(message.find("ncclBroadcast #1 (count 8, ncclFloat32, root 0)"), std::string::npos) << message;
  EXPECT_NE(message.find("ncclBroadcast #1 (count 8, ncclFloat32, root 1)"), std::string::npos) << message;
}

// One rank of each pair sums, the other takes the maximum: the calls differ in the reduction alone.
TEST_F(NcclCheck, AllReducesWithDifferentReductionsFailOnBothRanks) {
  DeviceBuffer<float> values(std::vector<float>(8, float(world_rank_ + 1)));
  NCCL_CHECK(ncclAllReduce(values.data(), values.data(), 8, ncclFloat32, even() ? ncclSum : ncclMax, pair_, stream_));
  const auto [error, message] = failure(pair_);
  EXPECT_EQ(error, ncclInvalidUsage);
  EXPECT_NE(message.find("ncclAllReduce #1 (count 8, ncclFloat32, ncclSum)"), std::string::npos) << message;
  EXPECT_NE(message.find("ncclAllReduce #1 (count 8, ncclFloat32, ncclMax)"), std::string::npos) << message;
  EXPECT_EQ(values.to_host(), std::vector<float>(8, float(world_rank_ + 1)));
}

// An all-reduce of 8 values against a reduce-scatter of 8 values a rank: the same count, data type
// and reduction, and no root; the calls differ in their kind alone.
TEST_F(NcclCheck, DifferentCollectivesWithTheSameArgumentsFailOnBothRanks) {
  DeviceBuffer<float> values(std::vector<float>(16, float(world_rank_ + 1)));
  if (even()) NCCL_CHECK(ncclAllReduce(values.data(), values.data(), 8, ncclFloat32, ncclSum, pair_, stream_));
  else NCCL_CHECK(ncclReduceScatter(values.data(), values.data() + 8, 8, ncclFloat32, ncclSum, pair_, stream_));
  const auto [error, message] = failure(pair_);
  EXPECT_EQ(error, ncclInvalidUsage);
  EXPECT_NE(message.find("ncclAllReduce #1 (count 8, ncclFloat32, ncclSum)"), std::string::npos) << message;
  EXPECT_NE(message.find("ncclReduceScatter #1 (count 8, ncclFloat32, ncclSum)"), std::string::npos) << message;
  EXPECT_EQ(values.to_host(), std::vector<float>(16, float(world_rank_ + 1)));
}

// NCCL pairs the k-th send from a to b with b's k-th receive from a, whatever the groups: here the
// even rank receives 4 values and sends 8 in one group, the odd rank receives the 8, then sends
// the 4, in two calls. Each receive meets the send of its own direction, not the first call.
TEST_F(NcclCheck, RanksMayGroupTheirTransfersDifferently) {
  const size_t sent = even() ? 8 : 4, received = even() ? 4 : 8;
  DeviceBuffer<float> mine(std::vector<float>(sent, float(world_rank_ + 1))), theirs(received);
  const int peer = even() ? 1 : 0;
  if (even()) {
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclRecv(theirs.data(), received, ncclFloat32, peer, pair_, stream_));
    NCCL_CHECK(ncclSend(mine.data(), sent, ncclFloat32, peer, pair_, stream_));
    NCCL_CHECK(ncclGroupEnd());
  } else {
    NCCL_CHECK(ncclRecv(theirs.data(), received, ncclFloat32, peer, pair_, stream_));
    NCCL_CHECK(ncclSend(mine.data(), sent, ncclFloat32, peer, pair_, stream_));
  }
  EXPECT_EQ(failure(pair_).first, ncclSuccess);
  const int peer_world_rank = world_rank_ / 2 * 2 + peer;
  EXPECT_EQ(theirs.to_host(), std::vector<float>(received, float(peer_world_rank + 1)));
}

// Rank 3 all-reduces 4 values where the others reduce 8: the operation fails on every rank.
TEST_F(NcclCheck, OneRanksCountInACollectiveFailsItOnEveryRank) {
  DeviceBuffer<float> values(8);
  NCCL_CHECK(ncclAllReduce(values.data(), values.data(), world_rank_ == 3 ? 4 : 8, ncclFloat32, ncclSum, world_,
                           stream_));
  const auto [error, message] = failure(world_);
  EXPECT_EQ(error, ncclInvalidUsage);
  EXPECT_NE(message.find("(count 4, ncclFloat32, ncclSum)"), std::string::npos) << message;
  EXPECT_NE(message.find("(count 8, ncclFloat32, ncclSum)"), std::string::npos) << message;
}

// A failed communicator's messages stay its own. Each pair's group here fails at its second
// transfer on the even rank and at its first on the odd one, which never posts the receive of the
// 8 values the even rank has sent: a communicator made next, in the MPI context the failed one
// held, would receive them in place of its own, of another size (MPI_ERR_TRUNCATE) or, as here,
// of the same size.
TEST_F(NcclCheck, AFreshCommunicatorAfterAFailedOneExchangesOnlyItsOwnData) {
  DeviceBuffer<float> stale(std::vector<float>(8, -1.0f)), received(8);
  const int peer = even() ? 1 : 0;
  NCCL_CHECK(ncclGroupStart());
  if (even()) {
    NCCL_CHECK(ncclSend(stale.data(), 8, ncclFloat32, peer, pair_, stream_));
    NCCL_CHECK(ncclRecv(received.data(), 8, ncclInt32, peer, pair_, stream_));
  } else {
    NCCL_CHECK(ncclSend(stale.data(), 4, ncclInt32, peer, pair_, stream_));
    NCCL_CHECK(ncclRecv(received.data(), 8, ncclFloat32, peer, pair_, stream_));
  }
  NCCL_CHECK(ncclGroupEnd());
  ASSERT_EQ(failure(pair_).first, ncclInvalidUsage);
  NCCL_CHECK(ncclCommDestroy(pair_));  // what TearDown does after the other tests' failures
  NCCL_CHECK(ncclCommSplit(world_, world_rank_ / 2, world_rank_, &pair_, nullptr));

  DeviceBuffer<float> mine(std::vector<float>(8, float(world_rank_ + 1))), sum(std::vector<float>(8, 1.0f));
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(mine.data(), 8, ncclFloat32, peer, pair_, stream_));
  NCCL_CHECK(ncclRecv(received.data(), 8, ncclFloat32, peer, pair_, stream_));
  NCCL_CHECK(ncclGroupEnd());
  NCCL_CHECK(ncclAllReduce(sum.data(), sum.data(), 8, ncclFloat32, ncclSum, pair_, stream_));
  EXPECT_EQ(failure(pair_).first, ncclSuccess);
  const int peer_world_rank = world_rank_ / 2 * 2 + peer;
  EXPECT_EQ(received.to_host(), std::vector<float>(8, float(peer_world_rank + 1)));
  EXPECT_EQ(sum.to_host(), std::vector<float>(8, 2.0f));
}

}  // namespace
