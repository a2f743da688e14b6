// No allocation after set-up: on every rank, for each schedule family of the layout tests
// (tests/mpi/layouts_test.cu) on 4 ranks, training steps 1 and 2, a validation pass and a sample
// make no device or pinned allocation and no free, counted by the CPU build (cpu/runtime/call_counts.h),
// whose cudaMalloc and cudaFree synchronise the device as a GPU's do. An allocation inside a step
// would wait for the device while the step's NCCL operations wait on peers. CPU build only
// (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/runtime/call_counts.h"
#include "cpu/runtime/settings.h"
#include "tests/cpu/mpi/counted_step.h"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

// 1F1B, AFAB, interleaved (v = 2 and 3, the early receives), zb-h1, zb-h2 and zb-v (the
// weight-gradient-input pools), recompute (the send buffers), replicas, an uneven split and bf16.
std::vector<Case> cases_of_world() {
  return {{1, 4, ScheduleKind::one_f_one_b, 1, false, 3, 4},
          {1, 4, ScheduleKind::afab, 1, true, 3, 4},
          {1, 4, ScheduleKind::interleaved, 2, false, 8, 8},
          {2, 2, ScheduleKind::interleaved, 3, true, 4, 6},
          {1, 4, ScheduleKind::zb_h1, 1, false, 5, 4},
          {1, 4, ScheduleKind::zb_h2, 1, true, 5, 4},
          {1, 4, ScheduleKind::zb_v, 2, false, 5, 8},
          {2, 2, ScheduleKind::one_f_one_b, 1, false, 3, 4, {3, 1}},
          {4, 1, ScheduleKind::one_f_one_b, 1, true, 2, 2},
          {2, 2, ScheduleKind::zb_v, 2, false, 3, 4, {}, true}};
}

// What a phase after set-up allocated and freed.
struct Churn {
  std::string phase;
  uint64_t allocations, frees;
};

template <typename Element>
std::vector<Churn> churn_in(const Case& c, const CommGroups& groups) {
  Trainer<Element> trainer = counted_step::trainer_of<Element>(c, groups);
  const auto [step1, step2] = counted_step::first_steps_calls(trainer);
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  cpu::CallCounts before = cpu::call_counts();
  validation_loss(trainer, reader, 2);
  const cpu::CallCounts validation = counted_step::difference(cpu::call_counts(), before);
  const int context[3] = {1, 2, 3};
  before = cpu::call_counts();
  next_token_logits(trainer, context, 3);
  const cpu::CallCounts sample = counted_step::difference(cpu::call_counts(), before);
  destroy_trainer(trainer);
  return {{"step 1", step1.allocations, step1.frees},
          {"step 2", step2.allocations, step2.frees},
          {"validation", validation.allocations, validation.frees},
          {"sample", sample.allocations, sample.frees}};
}

}  // namespace

TEST(DeviceAllocations, NoneInStepsOneAndTwoValidationOrSamplingOnEveryRank) {
  for (const Case& c : cases_of_world()) {
    WorldGroups world(c.dp, c.pp);
    const std::vector<Churn> churn = c.bf16 ? churn_in<__nv_bfloat16>(c, world.groups) : churn_in<float>(c, world.groups);
    for (const Churn& phase : churn) {
      EXPECT_EQ(phase.allocations, 0u) << describe(c) << ", rank " << rank_in_world() << ", " << phase.phase;
      EXPECT_EQ(phase.frees, 0u) << describe(c) << ", rank " << rank_in_world() << ", " << phase.phase;
    }
  }
}

// The cudaMalloc the count above relies on is counted, and waits for the device (a GPU's
// implicit synchronisation): after it returns, the stream's earlier work is done.
TEST(DeviceAllocations, CudaMallocCountsAndWaitsForTheDevice) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cpu::Settings saved = cpu::settings();
  cpu::settings().stream_delay_us = 20000;  // without the wait the memset would still be queued
  void* first = nullptr;
  CUDA_CHECK(cudaMalloc(&first, 64));
  CUDA_CHECK(cudaMemsetAsync(first, 0, 64, stream));
  const cpu::CallCounts before = cpu::call_counts();
  void* second = nullptr;
  CUDA_CHECK(cudaMalloc(&second, 64));
  const cpu::CallCounts after = cpu::call_counts();
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  cpu::settings() = saved;
  EXPECT_EQ(after.allocations - before.allocations, 1u);
  EXPECT_EQ(after.host_waits - before.host_waits, 1u);
  CUDA_CHECK(cudaFree(first));
  CUDA_CHECK(cudaFree(second));
  EXPECT_EQ(cpu::call_counts().frees - after.frees, 2u);
  CUDA_CHECK(cudaStreamDestroy(stream));
}
