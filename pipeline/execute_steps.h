// The executor's steps (pipeline/execute.h), one function per kind of schedule step, each
// recording what it used into its ExecutedStep. Used by pipeline/execute.cu's walk.
#pragma once
#include <vector>

#include "pipeline/execute.h"

// The key of (microbatch, chunk) in the executor's pools.
int key_of(const Executor& e, int microbatch, int chunk);
// The chunk on this stage that holds the virtual stage after (before) chunk's, or -1 when that
// virtual stage is on another stage or does not exist: a local hand-over (p == 1, or the V
// placement's turn on the last stage).
int local_next_chunk(const Executor& e, int chunk);
int local_previous_chunk(const Executor& e, int chunk);
// The stage that holds virtual stage `virtual_stage`.
int stage_of(const Executor& e, int virtual_stage);

// Takes a slot of chunk for key: its input buffer, and its activations unless recomputing.
int take_slot(Executor& e, int chunk, int key);
Activations<float>& activations_of(Executor& e, int chunk, int slot);
// The chunk's forward of a microbatch from its slot's input; the head gets the targets.
void forward_chunk(Executor& e, const std::vector<ParameterTensors<float>>& params, int chunk, int slot,
                   const int* host_targets, double loss_scale, int B, int T);

// F: returns the microbatch's mean loss on the chunk with the head, else 0. host_tokens and
// host_targets are the step's (m, B, T).
double forward_step(Executor& e, const std::vector<ParameterTensors<float>>& params, int microbatch, int chunk,
                    const int* host_tokens, const int* host_targets, double loss_scale, ExecutedStep& record);
// B, or with split I: the input gradient (and for B the parameter gradients).
void backward_step(Executor& e, const std::vector<ParameterTensors<float>>& params,
                   const std::vector<ParameterTensors<float>>& grads, float* grad_wte_head, const Action& action,
                   const int* host_targets, double loss_scale, ExecutedStep& record);
// W.
void weight_step(Executor& e, const std::vector<ParameterTensors<float>>& grads, float* grad_wte_head,
                 const Action& action, ExecutedStep& record);
// A group of sends and receives.
void transfer_step(Executor& e, const Step& step, ExecutedStep& record);
