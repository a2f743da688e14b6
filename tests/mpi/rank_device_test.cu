// Why every rank takes its own device before anything else (comm/rank_device.h): NCCL refuses a
// communicator in which two ranks of one node share a GPU. mpi_tests' main has given each rank
// device = its node-local rank; here the ranks of each node go back to device 0 together, as
// they would if that step were skipped. On a GPU, NCCL's init compares the peers' host and bus
// ids and fails on every rank with ncclInvalidUsage ("Duplicate GPU detected"); the CPU build's
// NCCL checks the same. Run under mpirun (-np 4 on one machine).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <string>

#include "comm/nccl_check.cuh"
#include "kernels/cuda_check.cuh"

TEST(RankDevice, RanksOfANodeSharingADeviceCannotFormACommunicator) {
  // The ranks of this node: ranks on different nodes may well use device 0 each.
  MPI_Comm node;
  int world_rank = 0, node_rank = 0, node_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  if (node_size < 2) {
    MPI_Comm_free(&node);
    GTEST_SKIP() << "one rank on this node: no device to share";
  }
  int own_device = -1;
  CUDA_CHECK(cudaGetDevice(&own_device));
  CUDA_CHECK(cudaSetDevice(0));
  ncclUniqueId id;
  if (node_rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, node);
  ncclComm_t comm = nullptr;

  const ncclResult_t result = ncclCommInitRank(&comm, node_size, id, node_rank);
  const std::string message = ncclGetLastError(nullptr);

  // Whatever the outcome, leave no communicator behind and this rank on its own device again.
  if (comm != nullptr) ncclCommAbort(comm);
  CUDA_CHECK(cudaSetDevice(own_device));
  MPI_Comm_free(&node);
  EXPECT_EQ(result, ncclInvalidUsage) << ncclGetErrorString(result);
  EXPECT_NE(message.find("Duplicate GPU"), std::string::npos) << message;
}
