// The single-process model on the device: parameters, gradients, one activation slot and
// the backward's scratch, and what a training run does with them: an optimizer step over
// accumulated microbatches, the validation loss, and the next-token logits for sampling.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <vector>

#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameters.h"
#include "trainer/data.h"
#include "trainer/optimizer.h"

struct Trainer {
  GPTConfig config;
  int B, T;          // sequences per microbatch, tokens per sequence
  int microbatches;  // per optimizer step
  cudaStream_t stream;
  cublasHandle_t cublas;
  float* parameter_memory;  // (num_parameters) llm.c's layout
  float* gradient_memory;   // (num_parameters) the same layout
  float* grad_wte_head;     // (Vp, C) the tied output projection's share of wte's gradient
  ParameterTensors<float> params;
  ParameterTensors<float> grads;
  Activations<float> acts;         // one slot: the whole model for (B, T)
  BackwardScratch<float> scratch;
  Optimizer optimizer;
  int* tokens;   // (B, T) device
  int* targets;  // (B, T) device
  std::vector<int> host_tokens;   // (B, T)
  std::vector<int> host_targets;  // (B, T)
  std::vector<float> host_logits;  // (Vp) one row of logits, for sampling
};

// Allocates everything once; parameters are uninitialised until upload_parameters.
Trainer create_trainer(const GPTConfig& config, int B, int T, int microbatches);
void destroy_trainer(Trainer& trainer);

// num_parameters(config) values in llm.c's order, to and from the device.
void upload_parameters(Trainer& trainer, const std::vector<float>& parameters);
std::vector<float> download_parameters(const Trainer& trainer);

struct StepResult {
  double loss;       // the mean of the microbatches' mean losses
  double grad_norm;  // the global gradient norm before clipping
};

// Optimizer step t (1, 2, ...): zeroes the gradients; for each of trainer.microbatches reads the
// next microbatch from reader, runs forward and backward (gradients accumulate, each loss
// scaled by 1 / (B T microbatches) so that the gradient is that of the step's mean loss); adds
// the tied embedding's two gradient shares; then AdamW with clipping.
StepResult train_step(Trainer& trainer, BatchReader& reader, const AdamWSettings& settings, double learning_rate,
                      int t);

// The mean loss of the first `batches` microbatches of reader (read from position 0; the
// reader's position is left where it was), forward only.
double validation_loss(Trainer& trainer, BatchReader& reader, int batches);

// The logits (V, the padding dropped) of the token after context (count <= T tokens), from a
// forward of one sequence of count tokens. The returned reference lives until the next call.
const std::vector<float>& next_token_logits(Trainer& trainer, const int* context, int count);
