// What the tests that count a training step's device calls share (call_counts_test.cu,
// dp_buckets_test.cu): the trainer of one of the pipeline tests' cases (tests/mpi/pipeline_harness.h)
// with the harness's initial parameters, and the calls (cpu/call_counts.h) of its second training
// step: the first allocates the activation slots.
#pragma once
#include "cpu/call_counts.h"
#include "tests/mpi/pipeline_harness.h"

namespace counted_step {

// after - before, field by field.
inline cpu::CallCounts difference(const cpu::CallCounts& after, const cpu::CallCounts& before) {
  return {after.host_waits - before.host_waits, after.launches - before.launches,
          after.nccl_calls - before.nccl_calls, after.nccl_bytes - before.nccl_bytes};
}

// The case's trainer (bf16 with fp32 master weights) at the harness's initial parameters.
template <typename Element>
Trainer<Element> trainer_of(const pipeline_harness::Case& c, const CommGroups& groups) {
  using namespace pipeline_harness;
  const GPTConfig config = config_of(c.layers);
  Trainer<Element> trainer = create_trainer<Element>(
      config, kB, kT, PipelineLayout{c.schedule, c.m, c.v, c.recompute, c.layers_per_stage}, groups,
      {true, kRoundingSeed});
  upload_parameters(trainer, initial_parameters(config));
  return trainer;
}

// Steps 1 and 2 of a fresh trainer on the harness's tokens; step 2's calls.
template <typename Element>
cpu::CallCounts second_step_calls(Trainer<Element>& trainer) {
  using namespace pipeline_harness;
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  train_step(trainer, reader, kSettings, kLearningRate, 1);
  const cpu::CallCounts before = cpu::call_counts();
  train_step(trainer, reader, kSettings, kLearningRate, 2);
  return difference(cpu::call_counts(), before);
}

}  // namespace counted_step
