// CUDA_CPU_NCCL_CHECK (cpu/nccl_check.h): calls that NCCL would pair but that do not match
// fail on both ranks with a message naming both calls, instead of hanging or exchanging
// garbage; calls that match run as without the check. CPU build only (cpu_mpi_tests, under
// mpirun -np 4): the check is the CPU build's.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <regex>
#include <string>
#include <vector>

#include "comm/nccl_check.cuh"
#include "cpu/settings.h"
#include "kernels/cuda_check.cuh"
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
    ncclUniqueId id;
    if (world_rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    NCCL_CHECK(ncclCommInitRank(&world_, size, id, world_rank_));
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
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  EXPECT_EQ(values.to_host(), std::vector<float>(8, 1 + 2 + 3 + 4));
  EXPECT_EQ(from_next.to_host(), std::vector<float>(8, float(next + 1)));
  EXPECT_EQ(from_previous.to_host(), std::vector<float>(8, float(previous + 1)));
  const std::vector<float> all = gathered.to_host();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(all[r * 8], float(r + 1)) << "row " << r;
}

// Even ranks reduce 8 values, odd ranks 16: both ranks of each pair fail, naming both calls.
TEST_F(NcclCheck, MismatchedCountFailsOnBothRanksNamingBothCalls) {
  DeviceBuffer<float> values(16);
  const ncclResult_t result =
      ncclAllReduce(values.data(), values.data(), even() ? 8 : 16, ncclFloat32, ncclSum, pair_, stream_);
  EXPECT_EQ(result, ncclInvalidUsage);
  const std::string expected = even() ? "rank 0's ncclAllReduce #1 \\(count 8, ncclFloat32, ncclSum\\) does not "
                                        "match rank 1's ncclAllReduce #1 \\(count 16, ncclFloat32, ncclSum\\)"
                                      : "rank 1's ncclAllReduce #1 \\(count 16, ncclFloat32, ncclSum\\) does not "
                                        "match rank 0's ncclAllReduce #1 \\(count 8, ncclFloat32, ncclSum\\)";
  EXPECT_TRUE(std::regex_search(ncclGetLastError(pair_), std::regex("CUDA_CPU_NCCL_CHECK: " + expected)))
      << ncclGetLastError(pair_);
  // The failed call was not queued, and the pair goes on: a matching call after it runs.
  NCCL_CHECK(ncclAllReduce(values.data(), values.data(), 16, ncclFloat32, ncclSum, pair_, stream_));
}

TEST_F(NcclCheck, SendAndReceiveOfDifferentTypesFailOnBothRanks) {
  DeviceBuffer<float> buffer(8);
  const int peer = even() ? 1 : 0;
  const ncclResult_t result = even() ? ncclSend(buffer.data(), 8, ncclFloat32, peer, pair_, stream_)
                                     : ncclRecv(buffer.data(), 8, ncclInt32, peer, pair_, stream_);
  EXPECT_EQ(result, ncclInvalidUsage);
  const std::string last = ncclGetLastError(pair_);
  EXPECT_NE(last.find("ncclSend #1 (to rank 1, count 8, ncclFloat32)"), std::string::npos) << last;
  EXPECT_NE(last.find("ncclRecv #1 (from rank 0, count 8, ncclInt32)"), std::string::npos) << last;
}

// One rank broadcasts from root 0, the other from root 1; and a collective against a send.
TEST_F(NcclCheck, OtherRootsAndACollectiveAgainstATransferFail) {
  DeviceBuffer<float> buffer(8);
  EXPECT_EQ(ncclBroadcast(buffer.data(), buffer.data(), 8, ncclFloat32, even() ? 0 : 1, pair_, stream_),
            ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(pair_)).find("root"), std::string::npos) << ncclGetLastError(pair_);
  const ncclResult_t result = even() ? ncclAllReduce(buffer.data(), buffer.data(), 8, ncclFloat32, ncclSum, pair_, stream_)
                                     : ncclSend(buffer.data(), 8, ncclFloat32, 0, pair_, stream_);
  EXPECT_EQ(result, ncclInvalidUsage);
  const std::string last = ncclGetLastError(pair_);
  EXPECT_NE(last.find("ncclAllReduce #2"), std::string::npos) << last;
  EXPECT_NE(last.find("ncclSend #2 (to rank 0"), std::string::npos) << last;
}

}  // namespace
