// AdamW over the tensors a pipeline stage owns (fp32 moments), with GPT-2's weight decay on
// the matrices and embeddings only, and clipping by the global gradient norm, which is the same
// bit for bit for every layout: each (tensor, layer) slot's squared sum is computed by the
// stage that owns it and the slots are gathered and added in a fixed order (comm/collectives.h).
// Parameters and gradients are float or bf16 (Element). bf16 parameters are llm.c's mixed
// precision: an fp32 master copy (unless switched off), and the bf16 values written from the
// fp32 update by stochastic rounding whose bits hash (seed, step, the element's index in the
// whole model's llm.c layout), so that every layout rounds every element alike.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/groups.h"
#include "kernels/adamw.cuh"
#include "kernels/global_norm.cuh"
#include "model/config.h"
#include "model/norm_slots.h"
#include "model/parameter_layout.h"
#include "trainer/step/adamw_tables.h"

struct AdamWSettings {
  double beta1;
  double beta2;
  double eps;
  double weight_decay;  // on the tensors parameter_tensor_has_weight_decay names
  double grad_clip;     // largest global gradient norm; 0: no clipping
};

// What bf16 parameters need besides AdamW's settings (llm.c's choices); fp32 ones need neither.
struct MixedPrecision {
  bool master_weights = true;  // an fp32 copy of the parameters that the updates go to (llm.c's -w 1)
  uint64_t rounding_seed = 0;  // stochastic rounding's bits are a hash of (this, t, element index)
};

// The elements of the stage whose optimizer state this rank keeps: all of them, or with ZeRO-1
// its shard (model/optimizer_shards.h), [begin, end) of the stage's allocation, in buffers of
// capacity elements (the stage's largest shard, so that every replica allocates alike).
struct OptimizerShard {
  size_t begin, end, capacity;
  bool of_replicas;  // ZeRO-1: the other replicas own the rest, and the norm's slots are summed over them
};

// The optimizer's device state, allocated once. The moments and the master weights have the
// layout of the shard of the stage's parameters (model/parameter_layout.h), from shard.begin.
struct Optimizer {
  GPTConfig config;
  std::vector<ParameterRegion> regions;  // the stage's within the shard
  OptimizerShard shard;
  float* m;               // (shard.capacity) first moments
  float* v;               // (shard.capacity) second moments
  float* master;          // (shard.capacity) fp32 master weights of bf16 parameters; nullptr: none
  uint64_t rounding_seed;  // MixedPrecision's
  float* norm_workspace;  // (global_norm_workspace_size(the stage's regions))
  float* norm_partials;   // (norm_slot_count(L)) the squared sum of each slot
  float* squared_norm;    // (1)
  NormTensor* norm_table;  // (norm_tensors) the regions with a slot (not the tied copy) and their slots
  int norm_tensors;
  unsigned norm_blocks;   // the table's blocks
  // The step's figures and decision on the device (queue_step_gate), and the tables of regions
  // the one AdamW launch reads.
  double* nonfinite_ranks;      // (1) the world's ranks whose loss sum is not finite
  double* norm;                 // (1) the global gradient norm
  AdamWGate* gate;              // (1)
  AdamWTables adamw_tables;     // one launch's: the regions (room for the stage's), blocks of shard.capacity
};

// Moments start at zero; the master weights (with_master_weights) are allocated, uninitialised:
// the caller writes them with the parameters.
Optimizer create_optimizer(const GPTConfig& config, const ParameterLayout& layout, bool with_master_weights,
                           uint64_t rounding_seed, const OptimizerShard& shard);
// The whole stage: no shards.
OptimizerShard whole_stage(const ParameterLayout& layout);
void destroy_optimizer(Optimizer& optimizer);

// Queues the global gradient norm's square: this stage's slots (fp32 sums of squares, two
// launches; with ZeRO-1 each replica its shard's, then summed over the replicas), gathered over
// the pipeline and summed in slot order into optimizer.squared_norm (queue_step_gate takes its root). Every stage of every replica gets the same value. Does not wait.
template <typename Element>
void queue_gradient_norm(Optimizer& optimizer, const CommGroups& groups, const Element* gradients,
                         cudaStream_t stream);

// Queues the step's decision (after queue_gradient_norm): the count over the world of ranks whose
// loss_sum (device, 1; 0 on ranks without losses) is not finite (one all-reduce over the world),
// then optimizer.norm and optimizer.gate (kernels/adamw.cuh's set_adamw_gate with grad_clip).
// Every rank decides alike. Does not wait.
void queue_step_gate(Optimizer& optimizer, const CommGroups& groups, const double* loss_sum, double grad_clip,
                     cudaStream_t stream);

// The table queue_gradient_norm last gathered (norm_slot_count(L) squared sums, every stage's), on the
// host. Waits for stream.
std::vector<float> download_norm_partials(const Optimizer& optimizer, cudaStream_t stream);

// Queues AdamW step t (1, 2, ...) of the shard's regions, in one launch, with the given learning
// rate, gated by optimizer.gate (the clipping factor, and nothing at all on a skipped step).
// parameters and gradients are the stage's allocations. bf16 parameters: the update reads and
// writes the master weights when there are any, else reads the parameters, and writes the
// parameters by stochastic rounding with the bits of (rounding_seed, t, each element's index in
// llm.c's layout of the whole model). Does not wait.
template <typename Element>
void queue_adamw_update(Optimizer& optimizer, Element* parameters, const Element* gradients,
                        const AdamWSettings& settings, double learning_rate, int t, cudaStream_t stream);
