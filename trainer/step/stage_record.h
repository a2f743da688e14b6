// What one pipeline stage measured in a step: train_step's report (trainer/step/trainer.h), which
// the step line and the JSON log print (trainer/program/log.h).
#pragma once
#include <vector>

#include "comm/host_exchange.h"
#include "comm/mesh.h"
#include "pipeline/executor_state.h"

// What one pipeline stage measured in a step.
struct StageRecord {
  int stage;
  double idle;              // 1 - busy / the step's span, from the executor's step timers
  double activation_bytes;  // the executor's activation slots and working sets
  double device_bytes;      // the stage's device allocations (kernels/device_memory.cuh's bytes in use):
                            // parameters, gradients, moments, slots and buffers; not CUDA's, cuBLAS's or NCCL's own
};

// The stage's record of its executor's last step. The device bytes are the project's own count (a
// rank holds one stage): on a GPU the driver's figure would add the CUDA context, cuBLAS's and
// NCCL's buffers and its rounding.
StageRecord measure_stage(int stage, const ExecutorAccounting& accounting);

// Replica 0's stages' records (each stage's tp rank 0's) on world rank 0, in stage order, from every
// rank's own; the other ranks get none. Collective over the world.
std::vector<StageRecord> gather_stage_records(const World& world, const Mesh& mesh, const StageRecord& own);
