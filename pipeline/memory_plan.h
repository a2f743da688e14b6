// The memory plan: every byte each pipeline stage's rank allocates on its device, item by item,
// computed before anything is allocated, from the model, the layer split and the schedule's own
// grid. A pure function: no device, no MPI. The activation slots, weight-gradient inputs and
// transfer buffers are counted by walking the stage's schedule with the executor's own takes and
// gives-back (plan_executor, pipeline/execute.h), so the plan holds the schedule's true peak in
// flight (zero-bubble, V-shaped and user-written schedules included), not a formula's.
// create_trainer (trainer/step/trainer.h) checks after allocating that it holds exactly the plan's
// resident bytes, so the plan and the allocations cannot drift apart unnoticed; the layout tests
// check the whole run's peak against it to the byte (tests/mpi/pipeline_harness.h).
//
// What it counts is what the project allocates (kernels/device_memory.cuh's device_alloc), cuBLAS's
// workspace included (the trainer gives the library its own): on a GPU the CUDA context, the
// pool a cuBLAS handle may keep of its own, NCCL's buffers and the driver's rounding come on top
// (docs/pipeline.md, "The memory plan").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/attention_kind.h"
#include "model/config.h"
#include "model/gpt.cuh"
#include "pipeline/pipedream.h"
#include "pipeline/schedule.h"

struct MemoryItem {
  std::string name;     // "activation slots, chunk 0"
  uint64_t count;       // buffers of bytes_each
  uint64_t bytes_each;
  uint64_t bytes;       // count x bytes_each
};

struct StageMemoryPlan {
  int stage;
  std::vector<MemoryItem> device;  // allocated before step 1 and held for the whole run
  uint64_t resident_bytes;         // their sum
  // Set-up's short-lived allocations on top of the resident ones (the communicators' first
  // operations, comm/connect.h), freed before step 1: the peak is resident + transient.
  uint64_t transient_bytes;
  uint64_t peak_bytes;
  uint64_t allocations;            // device allocations the resident items take
  std::vector<MemoryItem> pinned_host;  // page-locked host memory (cudaMallocHost)
  uint64_t pinned_host_bytes;
};

// Everything that decides the bytes. The schedule and virtual_stages are what the trainer runs
// (layout_schedule and check_layout, trainer/step/trainer.h).
struct MemoryPlanInput {
  GPTConfig config;
  int B, T;          // sequences per microbatch, tokens per sequence
  int microbatches;  // per replica and step
  int dp;            // replicas
  PipelineSchedule schedule;
  std::vector<LayerRange> virtual_stages;  // split_layers' ranges, index = virtual stage
  bool recompute;
  bool bf16;            // bf16 parameters, gradients, activations and messages
  bool master_weights;  // bf16 only: fp32 master weights
  uint64_t step_figures_bytes;  // the trainer's pinned record of a step's figures
  uint64_t cublas_workspace_bytes;  // the GEMMs' workspace (kernels/gemm.cuh): the device's
  AttentionKind attention = AttentionKind::materialized;  // sizes the activations and the backward scratch
  bool zero = false;  // ZeRO-1 over dp > 1: the optimizer state of the stage's largest shard (model/optimizer_shards.h)
  int tp = 1;  // tensor-parallel ranks per stage: each plans its shard (model/tensor_parallel_shard.h), alike on every tp rank
  bool sequence_parallel = false;  // tp > 1: the residual stream's activations and the messages are B T / tp rows
  // --schedule pipedream's rule over a run of `steps` (the schedule is then the run's lists): the
  // stashed weight versions, the head's ring of wte gradient shares, and stage 0's read-ahead
  // microbatches in the pinned buffers (pipeline/pipedream_run.h)
  std::optional<PipeDreamRule> pipedream = {};
  int steps = 0;
  std::vector<int> pipedream_drains = {};  // where its run drains, for --save-every (pipeline/pipedream.h)
};

// One plan per stage (index = stage); every replica of a stage holds the same. Throws
// std::runtime_error with one line when a byte count would not fit in 64 bits.
std::vector<StageMemoryPlan> plan_memory(const MemoryPlanInput& input);

// The stage whose peak is the largest (the first of equals).
int heaviest_stage(const std::vector<StageMemoryPlan>& plans);

// Chunk c of stage s is virtual stage placement.virtual_stage(s, c): the stage's chunks' ranges.
std::vector<LayerRange> chunks_of_stage(const std::vector<LayerRange>& virtual_stages, const Placement& placement,
                                        int stage);

// "1.50 GiB", "12.0 MiB", "512 B": bytes for people.
std::string format_bytes(uint64_t bytes);
