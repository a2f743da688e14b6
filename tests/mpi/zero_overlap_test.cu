// ZeRO-1's all-gather overlapped with the next forward (comm/data_parallel_sum.h,
// model/parameters_pending.h), at -np 4, dp 4 x pp 1 (the stage's forward needs no transfer, whose
// place in the rank's NCCL order would put it after every broadcast): the first layer's parameters
// are ready, and its forward may run, while the last layer's broadcast has not ended; and a forward
// queued while the broadcasts are held back waits for them instead of reading the parameters they
// are still to write (step 2's loss bitwise that of a run not held). Both re-run the step's all-gather (gather_updated_parameters) after a step,
// from the compute stream held or with the reduction stream held by a host function the test opens.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "model/parameters_pending.h"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

// A host function that holds its stream until *open (an std::atomic<bool>) is true.
void hold_until_open(void* open) {
  while (!static_cast<std::atomic<bool>*>(open)->load()) std::this_thread::yield();
}

struct ZeroOneTrainer {
  WorldGroups world{4, 1};
  GPTConfig config = config_of(4);
  Trainer<float> trainer;
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);

  ZeroOneTrainer() {
    PipelineLayout layout{ScheduleKind::one_f_one_b, 2, 1, false, {}};
    layout.zero = true;
    trainer = create_trainer<float>(config, kB, kT, layout, world.groups, MixedPrecision{true, kRoundingSeed});
    upload_parameters(trainer, initial_parameters(config));
    train_step(trainer, reader, kSettings, kLearningRate, 1);  // its broadcasts may still run
  }
  ~ZeroOneTrainer() { destroy_trainer(trainer); }
  void gather_again() {
    gather_updated_parameters(trainer.buckets, trainer.groups, trainer.parameter_memory, trainer.stream);
  }
};

TEST(ZeroOne, FirstLayerReadyWhileTheLastLayersBroadcastRuns) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  ZeroOneTrainer run;
  const ParametersPending& pending = *run.trainer.pending;
  const cudaEvent_t last_layer = pending.before[run.config.num_layers];  // index layer + 1
  ASSERT_NE(pending.before[1], nullptr);
  ASSERT_NE(pending.before[1], last_layer) << "layer 0 and layer 3 wait for the same broadcast";
  // The broadcasts wait for the update's event on the compute stream: held, none starts before
  // the probe below is queued behind layer 0's wait, exactly as the next forward's layer 0 is.
  std::atomic<bool> open{false};
  CUDA_CHECK(cudaLaunchHostFunc(run.trainer.stream, hold_until_open, &open));
  run.gather_again();
  cudaStream_t probe;
  cudaEvent_t first_layer_ready;
  CUDA_CHECK(cudaStreamCreate(&probe));
  CUDA_CHECK(cudaEventCreateWithFlags(&first_layer_ready, cudaEventDisableTiming));
  wait_for_parameters(&pending, 0, probe);
  CUDA_CHECK(cudaEventRecord(first_layer_ready, probe));
  open = true;
  while (cudaEventQuery(first_layer_ready) == cudaErrorNotReady) std::this_thread::yield();
  EXPECT_EQ(cudaEventQuery(last_layer), cudaErrorNotReady)
      << "layer 0's parameters were ready only once layer 3's broadcast had ended: nothing overlaps";
  CUDA_CHECK(cudaStreamSynchronize(run.trainer.buckets.stream));
  CUDA_CHECK(cudaStreamSynchronize(probe));
  CUDA_CHECK(cudaEventDestroy(first_layer_ready));
  CUDA_CHECK(cudaStreamDestroy(probe));
}

// Step 2's loss (every rank's microbatches summed: a NaN on any replica shows), its forward queued
// with step 1's broadcasts held back for 200 ms (a forward's kernel takes well under 1 ms) over
// parameters that are NaN (0xff bytes) where the other replicas own them, or not held.
double second_step_loss(bool hold) {
  ZeroOneTrainer run;
  Trainer<float>& trainer = run.trainer;
  std::atomic<bool> open{!hold};
  if (hold) {
    const OptimizerShard& owned = trainer.optimizer.shard;
    // Step 1's broadcasts, on the reduction stream, write these parameters too: they end first
    // (the race detector saw the NaN written beside them otherwise).
    CUDA_CHECK(cudaStreamSynchronize(trainer.buckets.stream));
    CUDA_CHECK(cudaMemsetAsync(trainer.parameter_memory, 0xff, owned.begin * sizeof(float), trainer.stream));
    CUDA_CHECK(cudaMemsetAsync(trainer.parameter_memory + owned.end, 0xff,
                               (trainer.parameter_layout.size - owned.end) * sizeof(float), trainer.stream));
    CUDA_CHECK(cudaLaunchHostFunc(trainer.buckets.stream, hold_until_open, &open));
    run.gather_again();
  }
  std::thread opener([&open] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    open = true;
  });
  const double loss = train_step(trainer, run.reader, kSettings, kLearningRate, 2).loss;
  opener.join();
  return loss;
}

TEST(ZeroOne, ForwardWaitsForTheBroadcastsItReads) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const double held = second_step_loss(true), free = second_step_loss(false);
  EXPECT_EQ(std::bit_cast<uint64_t>(held), std::bit_cast<uint64_t>(free))
      << "the forward read parameters before their broadcast: step 2's loss " << held << ", expected " << free;
}

}  // namespace
