// CUDA_CPU_NCCL_LATENCY_US (cpu/runtime/settings.h): each NCCL operation completes that long after its
// data has arrived, on its stream, without holding a core. CPU build only (cpu_mpi_tests, under
// mpirun -np 4): the latency is the CPU build's emulation of a network's.
#include <gtest/gtest.h>

#include "cpu/runtime/settings.h"
#include "tests/cpu/mpi/waiting_measure.h"
#include "tests/device_buffer.h"

// Rank 0 sends one float to rank 1, with a latency of 300 ms: on both ranks the stream is done
// no sooner than 300 ms after the call (a lower bound, whatever the machine's load), and the
// process used a small part of that in CPU time (the stream's worker sleeps). Without the
// setting the same exchange takes a few ms on this machine.
using NcclLatency = waiting_measure::SenderAndReceiver;
TEST_F(NcclLatency, EachOperationCompletesThatLongAfterItsDataWithoutHoldingACore) {
  DeviceBuffer<float> buffer(1);
  constexpr int kLatencyUs = 300000;
  cpu::settings().nccl_latency_us = kLatencyUs;
  MPI_Barrier(MPI_COMM_WORLD);
  const waiting_measure::Measure measure;
  if (rank_ == 0) NCCL_CHECK(ncclSend(buffer.data(), 1, ncclFloat32, 1, comm_, nullptr));
  if (rank_ == 1) NCCL_CHECK(ncclRecv(buffer.data(), 1, ncclFloat32, 0, comm_, nullptr));
  if (rank_ < 2) {
    const waiting_measure::Measure::Times t = measure.waited();
    EXPECT_GE(t.wall_seconds, kLatencyUs * 1e-6) << "rank " << rank_;
    EXPECT_LT(t.cpu_seconds, 0.3 * t.wall_seconds)
        << "rank " << rank_ << " used " << t.cpu_seconds << " s of CPU in " << t.wall_seconds << " s";
  }
  cpu::settings().nccl_latency_us = 0;
}
