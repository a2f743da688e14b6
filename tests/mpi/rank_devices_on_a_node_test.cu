// Every rank of a node runs on its own GPU (comm/rank_device.h): mpi_tests' main selected device
// = node-local rank modulo the devices the rank sees, and no two ranks of a node may have the
// same GPU, which is what NCCL would refuse ("Duplicate GPU detected"). Compared by GPU UUID, so
// that it also holds where a launcher gives each rank one GPU as device 0 (CUDA_VISIBLE_DEVICES
// per rank; docs/pipeline.md). Run under mpirun (-np 4 on one machine).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"

TEST(RankDevice, EachRankOfANodeIsOnItsOwnGpu) {
  int world_rank = 0, node_rank = 0, node_size = 0, device = -1, count = 0;
  MPI_Comm node;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaGetDeviceCount(&count));
  cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::vector<char> uuids(16 * size_t(node_size));
  MPI_Allgather(properties.uuid.bytes, 16, MPI_BYTE, uuids.data(), 16, MPI_BYTE, node);
  MPI_Comm_free(&node);

  EXPECT_EQ(device, node_rank % count);
  for (int other = 0; other < node_size; ++other) {
    if (other == node_rank) continue;
    EXPECT_NE(std::string(&uuids[16 * other], 16), std::string(&uuids[16 * node_rank], 16))
        << "local ranks " << node_rank << " and " << other << " share a GPU";
  }
}
