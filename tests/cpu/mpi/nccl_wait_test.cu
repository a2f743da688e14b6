// The CPU build's NCCL, which runs over MPI, lets a rank that waits for a peer sleep: with more
// ranks than cores, a waiting rank that polled would take the CPU its peers compute on. CPU
// build only (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4): on a GPU, NCCL's proxy thread
// polls by design, so the CPU time of a waiting rank says nothing about our code there.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/cpu/mpi/waiting_measure.h"
#include "tests/device_buffer.h"

// Rank 1 waits at least half a second for rank 0's send: rank 0 sleeps only once rank 1 has
// said, after starting its measure, that it goes to receive, so the wait follows from the order of
// events whatever the machine's load. What is measured is the receive's own waiting, on every
// thread of the process, and its CPU time is compared with the wall time of the same wait.
using Nccl = waiting_measure::SenderAndReceiver;
TEST_F(Nccl, WaitingRankDoesNotBurnCpu) {
  constexpr auto sender_delay = std::chrono::milliseconds(500);
  DeviceBuffer<float> buffer(1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    MPI_Recv(nullptr, 0, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(sender_delay);
    NCCL_CHECK(ncclSend(buffer.data(), 1, ncclFloat32, 1, comm_, nullptr));
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  } else if (rank_ == 1) {
    const waiting_measure::Measure measure;
    MPI_Send(nullptr, 0, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    NCCL_CHECK(ncclRecv(buffer.data(), 1, ncclFloat32, 0, comm_, nullptr));
    const waiting_measure::Measure::Times t = measure.waited();
    EXPECT_GE(t.wall_seconds, std::chrono::duration<double>(sender_delay).count()) << "rank 1 did not wait";
    EXPECT_LT(t.cpu_seconds, 0.2 * t.wall_seconds)
        << "rank 1 used " << t.cpu_seconds << " s of CPU in " << t.wall_seconds << " s of waiting";
  }
}
