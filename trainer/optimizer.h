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
#include "model/parameter_layout.h"

struct AdamWSettings {
  double beta1;
  double beta2;
  double eps;
  double weight_decay;  // on the tensors parameter_tensor_has_weight_decay names
  double grad_clip;     // largest global gradient norm; 0: no clipping
};

// The optimizer's device state, allocated once. The moments have the layout of the stage's
// parameters (model/parameter_layout.h).
struct Optimizer {
  GPTConfig config;
  std::vector<ParameterRegion> regions;  // the stage's
  float* m;               // (stage size) first moments
  float* v;               // (stage size) second moments
  float* norm_workspace;  // (global_norm_workspace_size(regions))
  float* norm_partials;   // (norm_slot_count(L)) the squared sum of each slot
  float* squared_norm;    // (1)
};

// Moments start at zero.
Optimizer create_optimizer(const GPTConfig& config, const ParameterLayout& layout);
void destroy_optimizer(Optimizer& optimizer);

// The global gradient norm: this stage's slots, gathered over the pipeline and summed in slot
// order. Every stage of every replica gets the same value. Waits for stream.
double gradient_norm(Optimizer& optimizer, const CommGroups& groups, const float* gradients, cudaStream_t stream);

// The table gradient_norm last gathered (norm_slot_count(L) squared sums, every stage's), on the
// host. Waits for stream.
std::vector<float> download_norm_partials(const Optimizer& optimizer, cudaStream_t stream);

// The update of adamw_step alone, with the norm gradient_norm returned (adamw_step is the two).
void adamw_update_stage(Optimizer& optimizer, float* parameters, const float* gradients,
                        const AdamWSettings& settings, double learning_rate, int t, double norm, cudaStream_t stream);

// One AdamW step t (1, 2, ...) of the stage's regions with the given learning rate, the gradient
// scaled by clip_factor(norm, grad_clip) when clipping is on. parameters and gradients are the
// stage's allocations. Returns the norm before clipping.
double adamw_step(Optimizer& optimizer, const CommGroups& groups, float* parameters, const float* gradients,
                  const AdamWSettings& settings, double learning_rate, int t, cudaStream_t stream);
