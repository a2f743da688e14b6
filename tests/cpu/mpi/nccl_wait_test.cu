// The CPU build's NCCL, which runs over MPI, lets a rank that waits for a peer sleep: with more
// ranks than cores, a waiting rank that polled would take the CPU its peers compute on. CPU
// build only (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4): on a GPU, NCCL's proxy thread
// polls by design, so the CPU time of a waiting rank says nothing about our code there.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "comm/nccl_check.cuh"
#include "kernels/cuda_check.cuh"
#include "tests/device_buffer.h"

namespace {

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

}  // namespace

// Rank 1 waits half a second for rank 0's send. The wait ends on an event made with
// cudaEventBlockingSync, as a program whose host thread should sleep would have it on a GPU
// (whose runtime spins in a synchronisation by default); what is measured is the receive's own
// waiting, on every thread of the process.
TEST(Nccl, WaitingRankDoesNotBurnCpu) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_GE(size, 2) << "a sender and a receiver";
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  constexpr auto sender_delay = std::chrono::milliseconds(500);
  DeviceBuffer<float> buffer(1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::this_thread::sleep_for(sender_delay);
    NCCL_CHECK(ncclSend(buffer.data(), 1, ncclFloat32, 1, comm, nullptr));
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  } else if (rank == 1) {
    const auto wall_start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    cudaEvent_t received;
    CUDA_CHECK(cudaEventCreateWithFlags(&received, cudaEventBlockingSync | cudaEventDisableTiming));
    NCCL_CHECK(ncclRecv(buffer.data(), 1, ncclFloat32, 0, comm, nullptr));
    CUDA_CHECK(cudaEventRecord(received, nullptr));
    CUDA_CHECK(cudaEventSynchronize(received));
    CUDA_CHECK(cudaEventDestroy(received));
    const double cpu_seconds = process_cpu_seconds() - cpu_start;
    const double wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    EXPECT_GT(wall_seconds, 0.8 * std::chrono::duration<double>(sender_delay).count()) << "rank 1 did not wait";
    EXPECT_LT(cpu_seconds, 0.2 * wall_seconds) << "rank 1 used " << cpu_seconds << " s of CPU in " << wall_seconds
                                               << " s of waiting";
  }
  NCCL_CHECK(ncclCommDestroy(comm));
}
