// The data-parallel sum in buckets (comm/data_parallel_sum.h), on the pipeline tests' tiny
// model (tests/mpi/pipeline_harness.h) with --dp 2 --pp 2 under mpirun -np 4: the NCCL calls of a
// training step, counted by the CPU build (cpu/runtime/call_counts.h), are the stage's buckets plus the
// fixed others; and each bucket is queued while its chunk's last backward is being queued, not
// before it nor after. With ZeRO-1 (--zero 1) the buckets' sums become reduces to their owners and
// broadcasts back, each of the stage's gradient elements once. CPU build only (build/cpu/tests/cpu_mpi_tests): the counts are the CPU runtime's.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "cpu/runtime/call_counts.h"
#include "tests/cpu/mpi/counted_step.h"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

// --dp 2 --pp 2: 1F1B, interleaved (two chunks per stage) and ZB-V (a split backward whose W
// writes the gradients, and stage 0 holding both the embedding and the head), fp32 and bf16.
std::vector<Case> cases() {
  return {{2, 2, ScheduleKind::one_f_one_b, 1, false, 4, 4},
          {2, 2, ScheduleKind::interleaved, 2, false, 4, 4},
          {2, 2, ScheduleKind::zb_v, 2, false, 4, 4},
          {2, 2, ScheduleKind::zb_v, 2, false, 4, 4, {}, true}};
}

bool has(const std::vector<LayerRange>& chunks, bool LayerRange::*use) {
  return std::any_of(chunks.begin(), chunks.end(), [&](const LayerRange& r) { return r.*use; });
}

// The NCCL calls of one training step on a stage with replicas and pp > 1: each message of its
// schedule (a send or a receive each), its layer buckets and wte's (when it holds wte), the
// tied-embedding sum (when it has the embedding or the head but not both), the norm's gather of
// the stages' partial sums, and the world's count of non-finite losses.
template <typename Element>
size_t expected_nccl_calls(const Trainer<Element>& trainer) {
  size_t messages = 0;
  for (const Step& step : trainer.executor.schedule)
    if (!is_compute(step)) messages += step.size();
  const bool embedding = has(trainer.chunks, &LayerRange::has_embedding);
  const bool head = has(trainer.chunks, &LayerRange::has_head);
  const size_t buckets = trainer.buckets.buckets.size() + (embedding || head ? 1 : 0);
  return messages + buckets + (embedding != head ? 1 : 0) + 1 + 1;
}

template <typename Element>
void expect_nccl_calls(const Case& c, const CommGroups& groups) {
  Trainer<Element> trainer = counted_step::trainer_of<Element>(c, groups);
  const uint64_t calls = counted_step::second_step_calls(trainer).nccl_calls;
  // A bucket per layer of the stage (wpe and lnfw, lnfb folded into their neighbouring layer's).
  size_t layers = 0;
  for (const LayerRange& r : trainer.chunks) layers += r.end_layer - r.first_layer;
  EXPECT_EQ(trainer.buckets.buckets.size(), layers) << describe(c) << ", rank " << rank_in_world();
  EXPECT_EQ(calls, expected_nccl_calls(trainer)) << describe(c) << ", rank " << rank_in_world();
  destroy_trainer(trainer);
}

// Where each bucket's all-reduce was queued: the kernel launches queued on the rank before it.
struct Queued {
  std::vector<uint64_t> launches_before;  // per bucket, in the order queued
  uint64_t launches_at_end;               // when execute_step returned
  std::vector<int> schedule_steps_before;  // per bucket: schedule steps wholly queued before it
  int last_compute_step;                   // index in the schedule of the stage's last F, B, I or W
};

// Per chunk, the schedule index of its last B or W: the step after which its gradients are final.
std::vector<int> last_gradient_steps(const StageSchedule& schedule, size_t chunks) {
  std::vector<int> last(chunks, -1);
  for (size_t i = 0; i < schedule.size(); ++i)
    for (const Action& a : schedule[i])
      if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight) last[a.chunk] = int(i);
  return last;
}

// One step's schedule as train_step queues it, with the buckets queued by the executor's report
// as train_step does, each noting what had been queued before it; then the rest of the sum.
template <typename Element>
Queued queue_step(Trainer<Element>& trainer) {
  Queued queued;
  GradientBuckets& buckets = trainer.buckets;
  buckets.queued.clear();
  trainer.executor.gradients_final = [&](int chunk, int layer) {
    const size_t before = buckets.queued.size();
    const uint64_t launches = cpu::call_counts().launches;
    queue_final_buckets(buckets, trainer.groups, trainer.gradient_memory, chunk, layer, trainer.stream);
    for (size_t i = before; i < buckets.queued.size(); ++i) {
      queued.launches_before.push_back(launches);
      queued.schedule_steps_before.push_back(trainer.executor.progress->queued);
    }
  };
  CUDA_CHECK(cudaMemsetAsync(trainer.gradient_memory, 0, trainer.parameter_layout.size * sizeof(Element),
                             trainer.stream));
  if (trainer.grad_wte_head != nullptr)
    CUDA_CHECK(cudaMemsetAsync(trainer.grad_wte_head, 0,
                               size_t(trainer.config.padded_vocab_size) * trainer.config.channels * sizeof(Element),
                               trainer.stream));
  execute_step(trainer.executor, trainer.params, trainer.grads, trainer.grad_wte_head, trainer.host_tokens,
               trainer.host_targets, StepShape{std::vector<int>(4, kT), 1.0 / (kB * kT * 4 * 2), double(kB * kT)});
  queued.launches_at_end = cpu::call_counts().launches;
  trainer.executor.gradients_final = nullptr;
  finish_data_parallel_sum(buckets, trainer.groups, trainer.gradient_memory, trainer.stream);
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));
  finish_step(trainer.executor);
  queued.last_compute_step = -1;
  for (size_t i = 0; i < trainer.executor.schedule.size(); ++i)
    if (is_compute(trainer.executor.schedule[i])) queued.last_compute_step = int(i);
  return queued;
}

// Step 2's calls of the case's trainer (zero: with ZeRO-1's shards), and the elements of the
// stage's gradient buckets (every layer's and wte's).
template <typename Element>
std::pair<cpu::CallCounts, size_t> bucketed_step(const Case& c, const CommGroups& groups, bool zero) {
  Trainer<Element> trainer = counted_step::trainer_of<Element>(c, groups, kB, zero);
  size_t bucketed = trainer.buckets.wte.count;
  for (const GradientBucket& b : trainer.buckets.buckets) bucketed += b.count;
  const cpu::CallCounts calls = counted_step::second_step_calls(trainer);
  destroy_trainer(trainer);
  return {calls, bucketed};
}

}  // namespace

// NCCL calls per step per stage = messages + buckets (one per layer, and wte's) + the tied sum
// + 2 (the norm's gather, the non-finite count).
TEST(DataParallelBuckets, NcclCallsPerStepAreTheBucketsAndTheFixedOnes) {
  for (const Case& c : cases()) {
    WorldGroups world(c.dp, c.pp);
    if (c.bf16)
      expect_nccl_calls<__nv_bfloat16>(c, world.groups);
    else
      expect_nccl_calls<float>(c, world.groups);
  }
}

// Every layer bucket is queued once, in reverse layer order within a chunk, while its chunk's last
// B or W is being queued: not before (a later microbatch's backward still adds to its gradients,
// which the sum would miss) nor after. So the first is queued while more of the backward's kernels
// are still to come, and with two chunks per stage before the stage's last compute step is queued.
TEST(DataParallelBuckets, BucketsAreQueuedDuringTheBackward) {
  for (const Case& c : cases()) {
    if (c.bf16) continue;
    WorldGroups world(c.dp, c.pp);
    Trainer<float> trainer = counted_step::trainer_of<float>(c, world.groups);
    queue_step(trainer);  // the first step allocates the slots
    const Queued queued = queue_step(trainer);
    const std::vector<int>& order = trainer.buckets.queued;
    const size_t n = trainer.buckets.buckets.size();
    ASSERT_EQ(order.size(), n + (trainer.buckets.wte.count > 0 ? 1 : 0)) << describe(c);
    if (trainer.buckets.wte.count > 0) {
      EXPECT_EQ(order.back(), int(n));  // wte's last
    }
    for (size_t i = 0; i + 1 < n; ++i) {
      const GradientBucket& a = trainer.buckets.buckets[order[i]];
      const GradientBucket& b = trainer.buckets.buckets[order[i + 1]];
      if (a.chunk == b.chunk && a.layer >= 0 && b.layer >= 0) {
        EXPECT_GT(a.layer, b.layer) << describe(c);
      }
    }
    ASSERT_EQ(queued.launches_before.size(), n);
    const std::vector<int> last = last_gradient_steps(trainer.executor.schedule, trainer.chunks.size());
    for (size_t k = 0; k < n; ++k) {
      const GradientBucket& bucket = trainer.buckets.buckets[order[k]];
      EXPECT_EQ(queued.schedule_steps_before[k], last[bucket.chunk])
          << describe(c) << ", rank " << rank_in_world() << ": chunk " << bucket.chunk << " layer " << bucket.layer
          << "'s bucket queued in " << to_text(trainer.executor.schedule[queued.schedule_steps_before[k]])
          << ", its chunk's last B or W is " << to_text(trainer.executor.schedule[last[bucket.chunk]]);
    }
    EXPECT_LT(queued.launches_before.front(), queued.launches_at_end) << describe(c) << ", rank " << rank_in_world();
    if (c.v == 2) {
      EXPECT_LT(queued.schedule_steps_before.front(), queued.last_compute_step)
          << describe(c) << ", rank " << rank_in_world();
    }
    destroy_trainer(trainer);
  }
}

// --zero 1: each bucket's all-reduce becomes reduces of its parts to their owners, and the step
// ends with broadcasts of the updated parameters from them (comm/data_parallel_sum.h): a step's
// reduces and broadcasts each carry exactly the stage's bucketed gradient elements (every layer
// bucket and wte's), once, and no all-reduce carries a bucket any more (only the tied-embedding
// sum, the norm's and the non-finite count remain, and the replicas' norm slot table).
TEST(DataParallelBuckets, ZeroOneReducesAndBroadcastsEachGradientElementOnce) {
  for (const Case& c : cases()) {
    WorldGroups world(c.dp, c.pp);
    const size_t element = c.bf16 ? 2 : 4;
    auto step_of = [&](bool zero) {
      return c.bf16 ? bucketed_step<__nv_bfloat16>(c, world.groups, zero) : bucketed_step<float>(c, world.groups, zero);
    };
    const auto [unsharded, bucketed] = step_of(false);
    const auto [sharded, bucketed_too] = step_of(true);
    const int reduce = int(cpu::NcclCall::reduce), broadcast = int(cpu::NcclCall::broadcast),
              all_reduce = int(cpu::NcclCall::all_reduce);
    EXPECT_EQ(bucketed_too, bucketed) << describe(c);
    EXPECT_EQ(sharded.nccl_bytes_of[reduce], bucketed * element) << describe(c) << ", rank " << rank_in_world();
    EXPECT_EQ(sharded.nccl_bytes_of[broadcast], bucketed * element) << describe(c) << ", rank " << rank_in_world();
    EXPECT_EQ(unsharded.nccl_calls_of[reduce] + unsharded.nccl_calls_of[broadcast], 0u) << describe(c);
    // Without shards the buckets' all-reduces carry them; with shards all-reduces carry less than
    // the buckets (the slot table of the norm, a few floats, is all that is new).
    EXPECT_GE(unsharded.nccl_bytes_of[all_reduce], bucketed * element) << describe(c);
    EXPECT_LT(sharded.nccl_bytes_of[all_reduce], unsharded.nccl_bytes_of[all_reduce] - bucketed * element / 2)
        << describe(c) << ", rank " << rank_in_world();
  }
}
