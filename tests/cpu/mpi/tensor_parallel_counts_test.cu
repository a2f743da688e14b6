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
// the CPU runtime's. Step 2 (the first allocates its slots).
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <type_traits>
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

}  // namespace

TEST(TensorParallelCounts, AllReducesPerStepAreTheLayersByHand) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  expect_tp_counts<float>({1, 2, ScheduleKind::one_f_one_b, 1, false, 4, 4});
  expect_tp_counts<float>({1, 2, ScheduleKind::zb_h1, 1, false, 4, 4});
  expect_tp_counts<__nv_bfloat16>({1, 2, ScheduleKind::one_f_one_b, 1, false, 3, 4, {}, true});
}
