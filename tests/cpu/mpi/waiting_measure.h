// What the CPU build's tests of waiting on NCCL share (tests/cpu/mpi/latency_test.cu,
// nccl_wait_test.cu): their fixture (a communicator over the whole world, of a sender and a
// receiver at least), and the wall and CPU time the process spends from a start until the work
// queued on the legacy default stream is done.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <ctime>

#include "comm/nccl_check.cuh"
#include "kernels/cuda_check.cuh"
#include "tests/cpu/mpi/world_communicator.h"

namespace waiting_measure {

// A test's world: rank 0 sends, rank 1 receives, over comm_ (every rank of the world).
class SenderAndReceiver : public testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_GE(size, 2) << "a sender and a receiver";
    comm_ = world_communicator();
  }
  void TearDown() override {
    if (comm_ != nullptr) NCCL_CHECK(ncclCommDestroy(comm_));
  }

  int rank_ = 0;
  ncclComm_t comm_ = nullptr;
};

inline double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Started at construction; waited() ends with the host waiting for the default stream on an event
// made with cudaEventBlockingSync, as a program whose host thread should sleep would have it on a
// GPU (whose runtime spins in a synchronisation by default). CPU time counts every thread of the
// process: the host's, the streams' workers, MPI's.
class Measure {
 public:
  Measure() : wall_start_(std::chrono::steady_clock::now()), cpu_start_(process_cpu_seconds()) {}
  struct Times {
    double wall_seconds, cpu_seconds;
  };
  Times waited() const {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, nullptr));
    CUDA_CHECK(cudaEventSynchronize(done));
    CUDA_CHECK(cudaEventDestroy(done));
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count(),
            process_cpu_seconds() - cpu_start_};
  }

 private:
  std::chrono::steady_clock::time_point wall_start_;
  double cpu_start_;
};

}  // namespace waiting_measure
