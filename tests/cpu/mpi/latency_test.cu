// CUDA_CPU_NCCL_LATENCY_US (cpu/settings.h): each NCCL operation completes that long after its
// data has arrived, on its stream, without holding a core. CPU build only (cpu_mpi_tests, under
// mpirun -np 4): the latency is the CPU build's emulation of a network's.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <ctime>

#include "comm/nccl_check.cuh"
#include "cpu/settings.h"
#include "kernels/cuda_check.cuh"
#include "tests/device_buffer.h"

namespace {

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

}  // namespace

// Rank 0 sends one float to rank 1, with a latency of 300 ms: on both ranks the stream is done
// no sooner than 300 ms after the call (a lower bound, whatever the machine's load), and the
// process used a small part of that in CPU time (the stream's worker sleeps). Without the
// setting the same exchange takes a few ms on this machine.
TEST(NcclLatency, EachOperationCompletesThatLongAfterItsDataWithoutHoldingACore) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_GE(size, 2) << "a sender and a receiver";
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  DeviceBuffer<float> buffer(1);
  constexpr int kLatencyUs = 300000;
  cpu::settings().nccl_latency_us = kLatencyUs;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  if (rank == 0) NCCL_CHECK(ncclSend(buffer.data(), 1, ncclFloat32, 1, comm, nullptr));
  if (rank == 1) NCCL_CHECK(ncclRecv(buffer.data(), 1, ncclFloat32, 0, comm, nullptr));
  if (rank < 2) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, nullptr));
    CUDA_CHECK(cudaEventSynchronize(done));
    CUDA_CHECK(cudaEventDestroy(done));
    const double cpu_seconds = process_cpu_seconds() - cpu_start;
    const double wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    EXPECT_GE(wall_seconds, kLatencyUs * 1e-6) << "rank " << rank;
    EXPECT_LT(cpu_seconds, 0.3 * wall_seconds) << "rank " << rank << " used " << cpu_seconds << " s of CPU in "
                                               << wall_seconds << " s";
  }
  cpu::settings().nccl_latency_us = 0;
  NCCL_CHECK(ncclCommDestroy(comm));
}
