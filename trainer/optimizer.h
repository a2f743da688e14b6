// AdamW over the tensors a pipeline stage owns (fp32 moments), with GPT-2's weight decay on
// the matrices and embeddings only, and clipping by the global gradient norm, which is the same
// bit for bit for every layout: each (tensor, layer) slot's squared sum is computed by the
// stage that owns it and the slots are gathered and added in a fixed order (comm/collectives.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "comm/groups.h"
#include "model/config.h"
#include "model/gpt.cuh"

struct AdamWSettings {
  double beta1;
  double beta2;
  double eps;
  double weight_decay;  // on the tensors parameter_tensor_has_weight_decay names
  double grad_clip;     // largest global gradient norm; 0: no clipping
};

// A piece of the parameter allocation a stage owns: one tensor, or one layer's slice of one.
struct ParameterRegion {
  int tensor;        // a ParameterTensor
  size_t offset;     // elements into the allocation
  size_t count;
  bool has_norm_slot;  // false for the last stage's copy of the tied wte, counted by the first
  size_t norm_slot;
};

// The regions of the stage whose chunks are chunk_ranges, chunk by chunk, each chunk's in
// norm-slot order (embeddings, layers, head); wte once even when one stage has both uses.
std::vector<ParameterRegion> stage_regions(const GPTConfig& config, const std::vector<LayerRange>& chunk_ranges);

// The optimizer's device state, allocated once. The moments have the parameters' layout;
// a stage uses its regions of them.
struct Optimizer {
  GPTConfig config;
  std::vector<ParameterRegion> regions;
  float* m;               // (num_parameters) first moments
  float* v;               // (num_parameters) second moments
  float* norm_workspace;  // (global_norm_workspace_size(regions))
  float* norm_partials;   // (norm_slot_count(L)) the squared sum of each slot
  float* squared_norm;    // (1)
};

// Moments start at zero.
Optimizer create_optimizer(const GPTConfig& config, const std::vector<LayerRange>& chunk_ranges);
void destroy_optimizer(Optimizer& optimizer);

// The global gradient norm: this stage's slots, gathered over the pipeline and summed in slot
// order. Every stage of every replica gets the same value. Waits for stream.
double gradient_norm(Optimizer& optimizer, const CommGroups& groups, const float* gradients, cudaStream_t stream);

// One AdamW step t (1, 2, ...) of the stage's regions with the given learning rate, the gradient
// scaled by clip_factor(norm, grad_clip) when clipping is on. parameters and gradients are whole
// allocations (num_parameters) in llm.c's layout. Returns the norm before clipping.
double adamw_step(Optimizer& optimizer, const CommGroups& groups, float* parameters, const float* gradients,
                  const AdamWSettings& settings, double learning_rate, int t, cudaStream_t stream);

// The moments to and from the host (num_parameters each), for checkpoints.
void download_moments(const Optimizer& optimizer, std::vector<float>& m, std::vector<float>& v);
void upload_moments(Optimizer& optimizer, const std::vector<float>& m, const std::vector<float>& v);
