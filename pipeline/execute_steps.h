// The executor's steps (pipeline/execute.h), one function per kind of schedule step, each
// recording what it used into its ExecutedStep. Used by pipeline/execute.cu's walk; instantiated
// for the executor's element types (float, bf16).
#pragma once
#include <vector>

#include "pipeline/executor_state.h"

// The key of (microbatch, chunk) in the executor's pools.
template <typename Element>
int key_of(const Executor<Element>& e, int microbatch, int chunk);
// The chunk on this stage that holds the virtual stage after (before) chunk's, or -1 when that
// virtual stage is on another stage or does not exist: a local hand-over (p == 1, or the V
// placement's turn on the last stage).
template <typename Element>
int local_next_chunk(const Executor<Element>& e, int chunk);
template <typename Element>
int local_previous_chunk(const Executor<Element>& e, int chunk);
// The stage that holds virtual stage `virtual_stage`.
template <typename Element>
int stage_of(const Executor<Element>& e, int virtual_stage);

// Takes a slot of chunk for key: its input buffer, and its activations unless recomputing.
template <typename Element>
int take_slot(Executor<Element>& e, int chunk, int key);
// Plans the pools (pipeline/buffer_pool.h) to the schedule's peaks: walks the schedule through
// the same takes and gives-back as the step functions below, host bookkeeping only, without
// device work. Every buffer is given back at the end of the walk.
template <typename Element>
void plan_pools(Executor<Element>& e);
template <typename Element>
Activations<Element>& activations_of(Executor<Element>& e, int chunk, int slot);
// The chunk's forward of a microbatch from its slot's input, on `on`; the head gets the targets.
template <typename Element>
void forward_chunk(Executor<Element>& e, const ComputeStream& on, const std::vector<ParameterTensors<Element>>& params,
                   int chunk, int slot, const int* host_targets, double loss_scale, int B, int T);

// Microbatch k's T in the current step (e.shape's).
template <typename Element>
int length_of(const Executor<Element>& e, int microbatch);
// Microbatch k's loss scale in the current step (e.shape's loss_scales, or its loss_scale).
template <typename Element>
double loss_scale_of(const Executor<Element>& e, int microbatch);
// Throws (one line) unless every microbatch of the schedule has a length in lengths, in [1, T].
template <typename Element>
void check_lengths(const Executor<Element>& e, const std::vector<int>& lengths);
// F: on the chunk with the head, adds the microbatch's loss sum / e.shape.loss_divisor to e.loss_sum
// (device). host_tokens and host_targets are the step's (m, B, T), microbatch k's (B, T_k) at the
// start of its block.
template <typename Element>
void forward_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params, int microbatch,
                  int chunk, const int* host_tokens, const int* host_targets, ExecutedStep& record);
// B, or with split I: the input gradient (and for B the parameter gradients), on `on`: the caller's
// stream, or the second compute stream for an overlapped pair's backward (stream 1 in the record).
template <typename Element>
void backward_step(Executor<Element>& e, const ComputeStream& on, const std::vector<ParameterTensors<Element>>& params,
                   const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head, const Action& action,
                   const int* host_targets, ExecutedStep& record);
// W.
template <typename Element>
void weight_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head,
                 const Action& action, ExecutedStep& record);
// Schedule step `index`, a group of sends and receives, on the transfer stream: it waits there for
// the last compute that used its buffers, records its start event, and posts the group.
template <typename Element>
void transfer_step(Executor<Element>& e, size_t index, const Step& step, ExecutedStep& record);

// The transfer-pool buffers (pipeline/buffer_pool.h) a compute action will use, found before it
// runs (what it holds, and what its takes will return): its slot, and the output gradient,
// input-gradient and hand-over or send buffers it reads or writes. W uses none of them.
struct BufferUse {
  BufferPool* pool;
  int index;
};
struct BufferUses {
  BufferUse uses[3];
  int count = 0;
};
template <typename Element>
BufferUses compute_uses(Executor<Element>& e, const Action& action);

// Records event on stream, holding the progress mutex (schedule_position may query it meanwhile).
template <typename Element>
void record_step_event(Executor<Element>& e, cudaEvent_t event, cudaStream_t stream);
