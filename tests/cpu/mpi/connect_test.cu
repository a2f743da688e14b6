// Every communicator connected before step 1 (comm/connect.h): connect_communicators runs one
// operation on each communicator a training step uses, the world (the non-finite count), the
// pipeline (the norm's gather), the data-parallel replicas (the gradient sums, dp > 1) and the
// tied embedding's two stages, then the sends and receives with each pipeline neighbour; counted
// by the CPU build (cpu/runtime/call_counts.h) on every layout of 4 ranks. CPU build only
// (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4).
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "comm/connect.h"
#include "cpu/runtime/call_counts.h"
#include "kernels/cuda_check.cuh"
#include "tests/mpi/pipeline_harness.h"

using namespace pipeline_harness;

TEST(ConnectCommunicators, OneOperationOnEachCommunicatorAStepUsesThenEachNeighbour) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  for (const auto& [dp, pp] : {std::pair{1, 4}, std::pair{2, 2}, std::pair{4, 1}}) {
    WorldGroups world(dp, pp);
    const Mesh& mesh = world.groups.mesh;
    const bool embedding = pp > 1 && (mesh.is_first_stage() || mesh.is_last_stage());
    // A send and a receive with each neighbour: one neighbour on a ring of two stages.
    const uint64_t neighbour_calls = pp == 1 ? 0 : pp == 2 ? 2 : 4;
    const uint64_t expected = 1 + (pp > 1 ? 1 : 0) + (dp > 1 ? 1 : 0) + (embedding ? 1 : 0) + neighbour_calls;
    const uint64_t before = cpu::call_counts().nccl_calls;
    connect_communicators(world.groups, stream);
    EXPECT_EQ(cpu::call_counts().nccl_calls - before, expected)
        << "dp " << dp << " pp " << pp << ", rank " << rank_in_world();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}
