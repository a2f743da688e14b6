// What a GPU may do with NCCL operations of several communicators, and what the project does
// about it (cpu/nccl/nccl_device.h, comm/nccl_order.h, comm/groups.h): with CUDA_CPU_NCCL_SERIAL=1 a
// device runs one NCCL operation at a time, in the order they start, so two ranks that start
// operations of two communicators in opposite orders deadlock, as they may on a GPU, while the
// default mode runs them; an abort waits for another communicator's operation running on the
// device, so abort_comm_groups must take the communicator of the running operation first. CPU
// build only (cpu_mpi_tests, under mpirun -np 4): the modes are the CPU build's.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "comm/collectives.h"
#include "comm/groups.h"
#include "comm/nccl_check.cuh"
#include "cpu/nccl/nccl_device.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/settings.h"
#include "cpu/runtime/streams.h"
#include "kernels/cuda_check.cuh"
#include "tests/cpu/mpi/world_communicator.h"
#include "tests/device_buffer.h"

namespace {

using namespace std::chrono_literals;

// Whether `work` returns within `limit`. A call that never returns is left blocked on its own
// thread (the process ends with the test binary): the test fails instead of hanging. The thread
// works on the caller's device, as every thread of a rank must.
bool returns_within(std::chrono::milliseconds limit, std::function<void()> work) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> returned = done->get_future();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::thread([work = std::move(work), done, device] {
    CUDA_CHECK(cudaSetDevice(device));
    work();
    done->set_value();
  }).detach();
  return returned.wait_for(limit) == std::future_status::ready;
}

// Whether every operation queued on stream has run, polled until `limit` has passed.
bool finishes_within(cudaStream_t stream, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cudaStreamQuery(stream) != cudaErrorNotReady) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Two communicators over the same pairs of ranks, (0, 1) and (2, 3), and a stream for each.
class NcclOrder : public testing::Test {
 protected:
  void SetUp() override {
    serial_before_ = cpu::settings().nccl_serial;  // make test runs this binary in serial mode
    cpu::settings().nccl_serial = false;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(size, 4) << "written for mpirun -np 4";
    world_ = world_communicator();
    NCCL_CHECK(ncclCommSplit(world_, world_rank_ / 2, world_rank_, &a_, nullptr));
    NCCL_CHECK(ncclCommSplit(world_, world_rank_ / 2, world_rank_, &b_, nullptr));
    CUDA_CHECK(cudaStreamCreate(&stream_a_));
    CUDA_CHECK(cudaStreamCreate(&stream_b_));
    CUDA_CHECK(cudaGetDevice(&device_));
  }
  void TearDown() override {
    cpu::settings().nccl_serial = serial_before_;
    CUDA_CHECK(cudaStreamDestroy(stream_a_));
    CUDA_CHECK(cudaStreamDestroy(stream_b_));
    for (ncclComm_t comm : {a_, b_, world_})
      if (comm != nullptr) NCCL_CHECK(ncclCommDestroy(comm));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  bool even() const { return world_rank_ % 2 == 0; }

  // An all-reduce of one float on comm, on stream; returns once it has begun on the device, so
  // that the next one surely starts after it.
  void all_reduce_and_wait_until_begun(ncclComm_t comm, cudaStream_t stream, DeviceBuffer<float>& value) {
    const uint64_t before = cpu::nccl_operations_begun(device_);
    NCCL_CHECK(ncclAllReduce(value.data(), value.data(), 1, ncclFloat32, ncclSum, comm, stream));
    while (cpu::nccl_operations_begun(device_) == before) std::this_thread::sleep_for(1ms);
  }

  // Even ranks start their operation on a, then on b; odd ranks on b, then on a.
  void start_in_opposite_orders(DeviceBuffer<float>& on_a, DeviceBuffer<float>& on_b) {
    if (even()) {
      all_reduce_and_wait_until_begun(a_, stream_a_, on_a);
      NCCL_CHECK(ncclAllReduce(on_b.data(), on_b.data(), 1, ncclFloat32, ncclSum, b_, stream_b_));
    } else {
      all_reduce_and_wait_until_begun(b_, stream_b_, on_b);
      NCCL_CHECK(ncclAllReduce(on_a.data(), on_a.data(), 1, ncclFloat32, ncclSum, a_, stream_a_));
    }
  }

  // Ends a deadlock: each rank aborts the communicator of its running operation first (the other
  // one's abort would wait for it), then the other. The aborted operations leave the process's
  // sticky error, which this test process clears to go on.
  void abort_running_first() {
    for (ncclComm_t* comm : even() ? std::vector<ncclComm_t*>{&a_, &b_} : std::vector<ncclComm_t*>{&b_, &a_}) {
      NCCL_CHECK(ncclCommAbort(*comm));
      *comm = nullptr;
    }
    cpu::synchronize_stream(stream_a_);
    cpu::synchronize_stream(stream_b_);
    cpu::set_sticky_error(cudaSuccess);
    cudaGetLastError();
  }

  bool serial_before_ = false;
  int world_rank_ = 0, device_ = 0;
  ncclComm_t world_ = nullptr, a_ = nullptr, b_ = nullptr;
  cudaStream_t stream_a_ = nullptr, stream_b_ = nullptr;
};

TEST_F(NcclOrder, OppositeOrdersOfTwoCommunicatorsRunInTheDefaultMode) {
  DeviceBuffer<float> on_a(std::vector<float>{float(world_rank_)}), on_b(std::vector<float>{10.0f * world_rank_});
  start_in_opposite_orders(on_a, on_b);
  ASSERT_TRUE(finishes_within(stream_a_, 20s) && finishes_within(stream_b_, 20s));
  const int pair_first = world_rank_ / 2 * 2;
  EXPECT_EQ(on_a.to_host()[0], float(2 * pair_first + 1));
  EXPECT_EQ(on_b.to_host()[0], 10.0f * (2 * pair_first + 1));
}

TEST_F(NcclOrder, OppositeOrdersOfTwoCommunicatorsDeadlockWhenTheDeviceRunsOneAtATime) {
  cpu::settings().nccl_serial = true;
  DeviceBuffer<float> on_a(1), on_b(1);
  start_in_opposite_orders(on_a, on_b);
  // Each rank's first operation waits for its partner's, which waits behind the partner's first.
  EXPECT_FALSE(finishes_within(stream_a_, 2s) && finishes_within(stream_b_, 2s));
  MPI_Barrier(MPI_COMM_WORLD);
  abort_running_first();
}

TEST_F(NcclOrder, AnAbortWaitsForAnotherCommunicatorsRunningOperation) {
  // Ranks 0 and 2 start an all-reduce on a that their partners never join: it runs for ever.
  DeviceBuffer<float> value(1);
  if (even()) all_reduce_and_wait_until_begun(a_, stream_a_, value);
  MPI_Barrier(MPI_COMM_WORLD);
  if (even()) {
    EXPECT_FALSE(returns_within(1000ms, [comm = b_] { ncclCommAbort(comm); })) << "aborting b did not wait for a";
    EXPECT_TRUE(returns_within(10000ms, [comm = a_] { ncclCommAbort(comm); })) << "aborting a waited";
    a_ = b_ = nullptr;  // both aborted: b's abort returns once a's operation has given up
    cpu::synchronize_stream(stream_a_);
    cpu::set_sticky_error(cudaSuccess);
    cudaGetLastError();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// comm/nccl_order.h: an operation on another stream than the one issued before it starts only
// once that one has ended. Stream a is held by a host function until the test lets it go, so its
// data-parallel sum cannot run; the world's sum, issued after it on stream b, waits for it,
// although every rank has issued it and nothing else holds stream b.
std::atomic<bool> stream_a_released{false};
void CUDART_CB hold_until_released(void*) {
  while (!stream_a_released.load()) std::this_thread::sleep_for(1ms);
}

TEST(NcclOrderGroups, AnOperationStartsOnlyAfterTheOneIssuedBeforeItOnAnotherStream) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  CommGroups groups = create_comm_groups(make_mesh(2, 2, 4, world_rank));
  cudaStream_t a, b;
  CUDA_CHECK(cudaStreamCreate(&a));
  CUDA_CHECK(cudaStreamCreate(&b));
  stream_a_released = false;
  DeviceBuffer<float> gradients(std::vector<float>{float(world_rank)});
  DeviceBuffer<double> count(std::vector<double>{1.0});
  CUDA_CHECK(cudaLaunchHostFunc(a, hold_until_released, nullptr));
  allreduce_data_parallel_gradients(groups, gradients.data(), 1, ncclFloat32, a);
  allreduce_world_sum(groups, count.data(), 1, b);
  EXPECT_FALSE(finishes_within(b, 500ms)) << "the world's sum ran before the data-parallel sum issued before it";
  stream_a_released = true;
  ASSERT_TRUE(finishes_within(a, 20s) && finishes_within(b, 20s));
  EXPECT_EQ(gradients.to_host()[0], float(world_rank % 2 + world_rank % 2 + 2));  // ranks r and r + 2
  EXPECT_EQ(count.to_host()[0], 4.0);
  CUDA_CHECK(cudaStreamDestroy(a));
  CUDA_CHECK(cudaStreamDestroy(b));
  destroy_comm_groups(groups);
}

// comm/groups.h: the communicator whose operation runs is aborted first, whichever it is.
TEST(NcclOrderGroups, AbortCommGroupsTakesTheRunningOperationsCommunicatorFirst) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  CommGroups groups = create_comm_groups(make_mesh(2, 2, 4, world_rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  // Replica 0 sums over the data-parallel group, which replica 1 never joins; the pipeline, the
  // first of the fixed order of aborts, has nothing running.
  DeviceBuffer<float> gradients(4);
  if (groups.mesh.dp_rank == 0) allreduce_data_parallel_gradients(groups, gradients.data(), 4, ncclFloat32, stream);
  std::this_thread::sleep_for(200ms);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(returns_within(10000ms, [&groups] { abort_comm_groups(groups); }))
      << "abort_comm_groups waited for the running data-parallel sum";
  cpu::synchronize_stream(stream);
  cpu::set_sticky_error(cudaSuccess);
  cudaGetLastError();
  CUDA_CHECK(cudaStreamDestroy(stream));
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
