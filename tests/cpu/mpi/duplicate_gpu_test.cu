// Why every rank of a node takes its own GPU before NCCL (comm/rank_device.h): NCCL refuses a
// communicator in which two of them share one ("Duplicate GPU detected"), whatever device number
// each process gives it. mpi_tests' main has given each rank its own device; here the ranks of
// each node go to one GPU together, once by selecting device 0 each (every device visible), once
// by each seeing only physical device 0 (CUDA_VISIBLE_DEVICES=0), and, as a launcher that gives
// each rank one GPU does, by each seeing only its own, which is no duplicate. The ranks use two
// devices each here, which cpu/runtime/devices.h allows for the test. CPU build only: on a GPU this is
// NCCL's own check, and CUDA_VISIBLE_DEVICES cannot change inside a process.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <optional>
#include <string>

#include "comm/nccl_check.cuh"
#include "cpu/runtime/devices.h"
#include "cpu/runtime/settings.h"
#include "kernels/cuda_check.cuh"

namespace {

class DuplicateGpu : public testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node_);
    MPI_Comm_rank(node_, &node_rank_);
    MPI_Comm_size(node_, &node_size_);
    CUDA_CHECK(cudaGetDevice(&own_device_));
    cpu::settings().devices_per_process = 2;
  }
  // This rank on its own device again, seeing every device, with only it recorded.
  void TearDown() override {
    cpu::settings() = saved_;
    CUDA_CHECK(cudaSetDevice(own_device_));
    cpu::forget_devices_used();
    MPI_Comm_free(&node_);
  }

  // The result and last error of a communicator of this node's ranks formed on device 0 as
  // CUDA_VISIBLE_DEVICES=visible shows the devices.
  std::pair<ncclResult_t, std::string> communicator_on_device_0(const std::optional<std::string>& visible) {
    cpu::settings().visible_devices = visible;
    CUDA_CHECK(cudaSetDevice(0));
    ncclUniqueId id;
    if (node_rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, node_);
    ncclComm_t comm = nullptr;
    const ncclResult_t result = ncclCommInitRank(&comm, node_size_, id, node_rank_);
    const std::string message = ncclGetLastError(nullptr);
    if (comm != nullptr) ncclCommAbort(comm);
    return {result, message};
  }

  cpu::Settings saved_ = cpu::settings();
  MPI_Comm node_;
  int world_rank_ = 0, node_rank_ = 0, node_size_ = 1, own_device_ = 0;
};

TEST_F(DuplicateGpu, RanksOfANodeSelectingOneDeviceCannotFormACommunicator) {
  if (node_size_ < 2) GTEST_SKIP() << "one rank on this node: no device to share";
  const auto [result, message] = communicator_on_device_0(std::nullopt);
  EXPECT_EQ(result, ncclInvalidUsage) << ncclGetErrorString(result);
  EXPECT_NE(message.find("Duplicate GPU detected : rank "), std::string::npos) << message;
}

TEST_F(DuplicateGpu, RanksOfANodeSeeingOnePhysicalDeviceCannotFormACommunicator) {
  if (node_size_ < 2) GTEST_SKIP() << "one rank on this node: no device to share";
  const auto [result, message] = communicator_on_device_0("0");
  EXPECT_EQ(result, ncclInvalidUsage) << ncclGetErrorString(result);
  EXPECT_NE(message.find("Duplicate GPU detected : rank "), std::string::npos) << message;
}

TEST_F(DuplicateGpu, RanksOfANodeSeeingOneOwnDeviceEachFormACommunicator) {
  const auto [result, message] = communicator_on_device_0(std::to_string(node_rank_));
  EXPECT_EQ(result, ncclSuccess) << ncclGetErrorString(result) << ": " << message;
}

}  // namespace
