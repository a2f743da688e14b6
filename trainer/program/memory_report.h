// The memory plan (pipeline/memory_plan.h) in the train program: --print-memory's table, the
// start-up line with each stage's planned peak, and the check, before anything is allocated, that
// every rank's plan fits the device memory it may use, which refuses the run, naming the rank, its
// items and the changes that would fit, when one does not.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "model/config.h"
#include "pipeline/memory_plan.h"
#include "trainer/command_line/options.h"
#include "trainer/step/trainer.h"

// What the plan of a run depends on.
struct PlannedRun {
  TrainOptions options;
  GPTConfig config;
  int B, T;
  Mesh mesh;  // rank 0's view: the plan is per stage, the same for every replica
  PipelineLayout layout;
};

// From the options alone: the model from the flags or the --init or --resume file's header (its
// parameters are not read), the world of --world or else mpirun's. Throws std::runtime_error with
// one line for a layout the trainer would refuse.
PlannedRun planned_run(const TrainOptions& options, int world_size);
// The same with the model's config already read (planning many layouts of one model).
PlannedRun planned_run(const TrainOptions& options, int world_size, const GPTConfig& config);
// The plan's inputs: the schedule and layer split the trainer would run, and the rest.
MemoryPlanInput run_memory_input(const PlannedRun& run);
std::vector<StageMemoryPlan> plan_run_memory(const PlannedRun& run);

// Every stage's items and peak, one column per stage, with the ranks that hold each stage.
std::string memory_table(const PlannedRun& run, const std::vector<StageMemoryPlan>& plans);
// "memory plan: peak 31.9 MiB on stage 0, 25.2 MiB on stage 1, ... (--print-memory for the items)"
std::string planned_peaks_line(const std::vector<StageMemoryPlan>& plans);

// The device memory this rank may plan for: cudaMemGetInfo's free bytes less a margin of 1/32 of
// the device (docs/pipeline.md says what it covers), and at most --memory-limit.
struct DeviceBudget {
  uint64_t free_bytes, total_bytes;  // cudaMemGetInfo's, before the run allocates
  uint64_t margin;                   // total / 32
  uint64_t usable;                   // free - margin, at most --memory-limit
};
DeviceBudget device_budget(const TrainOptions& options);
uint64_t usable_device_bytes(const TrainOptions& options);
// "device memory: 62.0 MiB usable (64.0 MiB free of 64.0 MiB, less a margin of 2.00 MiB)": what
// the device had before the run (on a GPU, total - free is the CUDA context's and other processes').
std::string device_budget_line(const DeviceBudget& budget, const TrainOptions& options);

// After set-up, what the device holds besides the plan's resident bytes: "device memory after
// set-up on rank 0: 2.61 GiB in use, 2.17 GiB of them the plan's, 450 MiB the CUDA context's,
// NCCL's, the driver's rounding and other processes'" (cudaMemGetInfo's total - free).
std::string device_use_line(const StageMemoryPlan& plan);

// Collective over the world: every rank gives its usable bytes; when a rank's stage plans more,
// throws std::runtime_error on every rank with the same text: the first such rank, its items
// against its limit, and the changes that would fit, each with its heaviest stage's plan.
void check_memory_fits(const PlannedRun& run, uint64_t usable_bytes);
