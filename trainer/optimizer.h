// AdamW over the model's parameter tensors (fp32 moments), with GPT-2's weight decay on the
// matrices and embeddings only, the deterministic global gradient norm and clipping by it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "model/config.h"

struct AdamWSettings {
  double beta1;
  double beta2;
  double eps;
  double weight_decay;  // on the tensors parameter_tensor_has_weight_decay names
  double grad_clip;     // largest global gradient norm; 0: no clipping
};

// The optimizer's device state, allocated once.
struct Optimizer {
  GPTConfig config;
  float* m;             // (num_parameters) first moments, the parameters' layout
  float* v;             // (num_parameters) second moments
  float* norm_workspace;  // (global_norm_workspace_size(1))
  float* squared_norm;    // (1)
};

// Moments start at zero.
Optimizer create_optimizer(const GPTConfig& config);
void destroy_optimizer(Optimizer& optimizer);

// The gradient's global norm, its sum of squares reduced over the whole allocation as one tensor
// (one launch: in the CPU build each launch of the norm kernel costs as much as a small model's
// step). Waits for stream.
double gradient_norm(Optimizer& optimizer, const float* gradients, cudaStream_t stream);  // (num_parameters)

// One AdamW step t (1, 2, ...) of every tensor with the given learning rate, the gradient
// scaled by clip_factor(norm, grad_clip) when clipping is on. parameters and gradients are
// whole allocations (num_parameters) in llm.c's layout. Returns the norm before clipping.
double adamw_step(Optimizer& optimizer, float* parameters, const float* gradients, const AdamWSettings& settings,
                  double learning_rate, int t, cudaStream_t stream);

// The moments to and from the host (num_parameters each), for checkpoints.
void download_moments(const Optimizer& optimizer, std::vector<float>& m, std::vector<float>& v);
void upload_moments(Optimizer& optimizer, const std::vector<float>& m, const std::vector<float>& v);
