// The tensor-parallel all-reduces of a training step (issue 33), counted by the CPU build on the
// tp communicator alone (cpu::nccl_comm_counts) at tp 2 x pp 2 under mpirun -np 4, against the
// count derived by hand from the layers (model/tensor_parallel_linear.h, model/vocab_parallel.h):
// per microbatch, each block's two row-parallel outputs in the forward and its two
// column-parallel input gradients in the backward, B T C elements each; the embedding's sum of
// B T C on the stage with the embedding; on the stage with the head the loss's two reductions
// (the rows' maxima, B T, then their exponentials' sums beside the target logits, 2 B T, in
// Compute<Element>) and the head's input gradient (B T C); and once per step the norm's partial
// sums (norm_slot_count floats). A split backward (zb-h1) makes the same calls: I issues the
// column-parallel ones, W none. CPU build only (build/cpu/tests/cpu_mpi_tests): the counts are
// the CPU runtime's. Step 2 (the first allocates its slots). With --sequence-parallel the same
// step's all-gathers, reduce-scatters and all-reduces by hand (expected_sequence_parallel_counts),
// and the pipeline's messages a tp-th of B T C.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/runtime/call_counts.h"
#include "model/norm_slots.h"
#include "tests/cpu/mpi/counted_step.h"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

// The tp communicator's calls and bytes in one training step, by hand (see the top).
template <typename Element>
cpu::NcclCommCounts expected_tp_counts(const Trainer<Element>& trainer, int microbatches) {
  const uint64_t BT = uint64_t(trainer.B) * trainer.T, btc = BT * trainer.config.channels * sizeof(Element);
  const uint64_t row = BT * sizeof(Compute<Element>);
  cpu::NcclCommCounts per_microbatch;
  for (const LayerRange& r : trainer.chunks) {
    const uint64_t layers = uint64_t(r.end_layer - r.first_layer);
    per_microbatch.calls += 4 * layers + (r.has_embedding ? 1 : 0) + (r.has_head ? 3 : 0);
    per_microbatch.bytes += (4 * layers + (r.has_embedding ? 1 : 0) + (r.has_head ? 1 : 0)) * btc +
                            (r.has_head ? 3 * row : 0);
  }
  const uint64_t m = uint64_t(microbatches);
  return {m * per_microbatch.calls + 1,
          m * per_microbatch.bytes + norm_slot_count(trainer.config.num_layers) * sizeof(float)};
}

template <typename Element>
void expect_tp_counts(const Case& c) {
  WorldGroups world(c.dp, c.pp, 2);
  Trainer<Element> trainer = counted_step::trainer_of<Element>(c, world.groups);
  BatchReader reader = make_batch_reader(dataset(), trainer.B, trainer.T, false, 1);
  train_step(trainer, reader, kSettings, kLearningRate, 1);
  const cpu::NcclCommCounts before = cpu::nccl_comm_counts(world.groups.tensor_parallel);
  train_step(trainer, reader, kSettings, kLearningRate, 2);
  const cpu::NcclCommCounts after = cpu::nccl_comm_counts(world.groups.tensor_parallel);
  const cpu::NcclCommCounts expected = expected_tp_counts(trainer, c.m);
  EXPECT_EQ(after.calls - before.calls, expected.calls) << describe(c) << ", rank " << rank_in_world();
  EXPECT_EQ(after.bytes - before.bytes, expected.bytes) << describe(c) << ", rank " << rank_in_world();
  destroy_trainer(trainer);
}

// The same with sequence parallelism (model/gpt_sequence_parallel.cu), per microbatch: each block
// gathers its two LayerNorm outputs in the forward and, in the backward, the residual stream's
// gradient twice and the two LayerNorm outputs again (6 all-gathers, each counted as its B T C / tp
// bytes sent), reduce-scatters its two row-parallel outputs and its two column-parallel input
// gradients (4, each counted as the B T C summed), and all-reduces its LayerNorms' four gradients
// (4 C elements); the embedding reduce-scatters its output and gathers its gradient; the head
// gathers lnf's output twice (forward, backward), reduce-scatters its input gradient, all-reduces
// lnf's two gradients (2 C) and makes the loss's two reductions as without it.
template <typename Element>
cpu::NcclCommCounts expected_sequence_parallel_counts(const Trainer<Element>& trainer, int microbatches, int tp) {
  const uint64_t BT = uint64_t(trainer.B) * trainer.T, C = trainer.config.channels;
  const uint64_t btc = BT * C * sizeof(Element), shard = btc / tp, row = BT * sizeof(Compute<Element>);
  cpu::NcclCommCounts per_microbatch;
  for (const LayerRange& r : trainer.chunks) {
    const uint64_t layers = uint64_t(r.end_layer - r.first_layer);
    per_microbatch.calls += 11 * layers + (r.has_embedding ? 2 : 0) + (r.has_head ? 6 : 0);
    per_microbatch.bytes += layers * (6 * shard + 4 * btc + 4 * C * sizeof(Element)) +
                            (r.has_embedding ? btc + shard : 0) +
                            (r.has_head ? 2 * shard + btc + 2 * C * sizeof(Element) + 3 * row : 0);
  }
  const uint64_t m = uint64_t(microbatches);
  return {m * per_microbatch.calls + 1,
          m * per_microbatch.bytes + norm_slot_count(trainer.config.num_layers) * sizeof(float)};
}

// Step 2's calls and bytes on the tp and pipeline communicators, with or without --sequence-parallel.
template <typename Element>
std::pair<cpu::NcclCommCounts, cpu::NcclCommCounts> second_step_counts(const Case& c, const CommGroups& groups,
                                                                       bool sequence_parallel, int* B_T_C = nullptr) {
  Trainer<Element> trainer = counted_step::trainer_of<Element>(c, groups, kB, false, sequence_parallel);
  BatchReader reader = make_batch_reader(dataset(), trainer.B, trainer.T, false, 1);
  train_step(trainer, reader, kSettings, kLearningRate, 1);
  const cpu::NcclCommCounts tp = cpu::nccl_comm_counts(groups.tensor_parallel);
  const cpu::NcclCommCounts pipeline = cpu::nccl_comm_counts(groups.pipeline);
  train_step(trainer, reader, kSettings, kLearningRate, 2);
  const cpu::NcclCommCounts tp_after = cpu::nccl_comm_counts(groups.tensor_parallel);
  const cpu::NcclCommCounts pipeline_after = cpu::nccl_comm_counts(groups.pipeline);
  if (sequence_parallel) {
    const cpu::NcclCommCounts expected = expected_sequence_parallel_counts(trainer, c.m, 2);
    EXPECT_EQ(tp_after.calls - tp.calls, expected.calls) << describe(c) << ", rank " << rank_in_world();
    EXPECT_EQ(tp_after.bytes - tp.bytes, expected.bytes) << describe(c) << ", rank " << rank_in_world();
  }
  if (B_T_C) *B_T_C = trainer.B * trainer.T * trainer.config.channels;
  destroy_trainer(trainer);
  return {{tp_after.calls - tp.calls, tp_after.bytes - tp.bytes},
          {pipeline_after.calls - pipeline.calls, pipeline_after.bytes - pipeline.bytes}};
}

// At tp 2 x pp 2 with --sequence-parallel: the tp communicator's calls and bytes by hand, and the
// pipeline's: the same calls as without it, and each rank's m messages (activations from stage 0,
// gradients from stage 1) of B T C / tp elements, the rank's sequence shard: m B T C / 2 elements
// fewer than without it (the rest of the pipeline communicator's bytes, the norm's and the loss's
// sums, unchanged).
template <typename Element>
void expect_sequence_parallel_counts(const Case& c) {
  WorldGroups world(c.dp, c.pp, 2);
  int btc = 0;
  const auto with = second_step_counts<Element>(c, world.groups, true, &btc);
  const auto without = second_step_counts<Element>(c, world.groups, false);
  EXPECT_EQ(with.second.calls, without.second.calls) << "rank " << rank_in_world() << ": the pipeline's calls";
  EXPECT_EQ(without.second.bytes - with.second.bytes, uint64_t(c.m) * btc / 2 * sizeof(Element))
      << "rank " << rank_in_world() << ": the pipeline's messages";
}

}  // namespace

TEST(TensorParallelCounts, SequenceParallelCollectivesAndMessagesPerStepAreTheLayersByHand) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  expect_sequence_parallel_counts<float>({1, 2, ScheduleKind::one_f_one_b, 1, false, 4, 4});
}

TEST(TensorParallelCounts, AllReducesPerStepAreTheLayersByHand) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  expect_tp_counts<float>({1, 2, ScheduleKind::one_f_one_b, 1, false, 4, 4});
  expect_tp_counts<float>({1, 2, ScheduleKind::zb_h1, 1, false, 4, 4});
  expect_tp_counts<__nv_bfloat16>({1, 2, ScheduleKind::one_f_one_b, 1, false, 3, 4, {}, true});
}
