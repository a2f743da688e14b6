// What the tests that count a training step's device calls share (call_counts_test.cu,
// dp_buckets_test.cu, device_allocations_test.cu): the trainer of one of the pipeline tests'
// cases (tests/mpi/pipeline_harness.h) with the harness's initial parameters, and the calls
// (cpu/runtime/call_counts.h) of its first two training steps.
#pragma once
#include <utility>

#include "cpu/runtime/call_counts.h"
#include "tests/mpi/pipeline_harness.h"

namespace counted_step {

// after - before, field by field.
inline cpu::CallCounts difference(const cpu::CallCounts& after, const cpu::CallCounts& before) {
  cpu::CallCounts counts{after.host_waits - before.host_waits, after.launches - before.launches,
                         after.nccl_calls - before.nccl_calls, after.nccl_bytes - before.nccl_bytes,
                         after.allocations - before.allocations, after.frees - before.frees};
  for (int kind = 0; kind < int(cpu::NcclCall::kinds); ++kind) {
    counts.nccl_calls_of[kind] = after.nccl_calls_of[kind] - before.nccl_calls_of[kind];
    counts.nccl_bytes_of[kind] = after.nccl_bytes_of[kind] - before.nccl_bytes_of[kind];
  }
  return counts;
}

// The case's trainer (bf16 with fp32 master weights) of B sequences per microbatch at the
// harness's initial parameters;
// zero: ZeRO-1's optimizer-state shards over the replicas (--zero 1); sequence_parallel: --sequence-parallel.
template <typename Element>
Trainer<Element> trainer_of(const pipeline_harness::Case& c, const CommGroups& groups,
                            int B = pipeline_harness::kB, bool zero = false, bool sequence_parallel = false) {
  using namespace pipeline_harness;
  const GPTConfig config = config_of(c.layers);
  PipelineLayout layout{c.schedule, c.m, c.v, c.recompute, c.layers_per_stage};
  layout.zero = zero;
  layout.sequence_parallel = sequence_parallel;
  Trainer<Element> trainer = create_trainer<Element>(config, B, kT, layout, groups, {true, kRoundingSeed});
  upload_parameters(trainer, initial_parameters(config));
  return trainer;
}

// Steps 1 and 2 of a fresh trainer on data (at least one microbatch of tokens); each step's calls.
template <typename Element>
std::pair<cpu::CallCounts, cpu::CallCounts> first_steps_calls(Trainer<Element>& trainer,
                                                              const TokenDataset& data = pipeline_harness::dataset()) {
  using namespace pipeline_harness;
  BatchReader reader = make_batch_reader(data, trainer.B, trainer.T, false, 1);
  const cpu::CallCounts start = cpu::call_counts();
  train_step(trainer, reader, kSettings, kLearningRate, 1);
  const cpu::CallCounts between = cpu::call_counts();
  train_step(trainer, reader, kSettings, kLearningRate, 2);
  return {difference(between, start), difference(cpu::call_counts(), between)};
}

// Step 2's calls: a step with one before it, as most of a run's are.
template <typename Element>
cpu::CallCounts second_step_calls(Trainer<Element>& trainer, const TokenDataset& data = pipeline_harness::dataset()) {
  return first_steps_calls(trainer, data).second;
}

}  // namespace counted_step
