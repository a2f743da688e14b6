// The executor of one pipeline stage: walks the stage's schedule (pipeline/schedule.h) step by
// step against the model's layer ranges in the element type Element (float, or bf16 with bf16
// activations, gradients and messages), running each F, B, I and W on the device and each group
// of sends and receives as one NCCL group, and accounts for what it did: the trace of what each
// executed step used (microbatch, chunk, slot, peer), every step's time (CUDA events, and an
// NVTX range named as the step, so Nsight Systems shows the schedule), the activation slots it
// allocated and their bytes. While it runs, it publishes which schedule step the device is in,
// for a watchdog on another thread (schedule_position).
//
// Buffers. A microbatch in flight on a chunk holds one activation slot from the chunk's pool,
// taken when its input arrives (the receive, the forward on the first virtual stage, or the
// forward of the chunk before it on this stage) and given back after its backward (B or I). The
// pools are the schedule's peak (a 1F1B stage s of p holds min(p - s, m) slots, AFAB m), found by
// walking the schedule's takes and gives-back before step 1 (plan_pools, pipeline/execute_steps.h)
// and allocated then: a device allocation synchronises the device, and inside a step it could
// stall NCCL operations that wait on peers. A pool that would grow later throws. A slot holds the
// chunk's input (the previous stage's output, B T C elements, or the B T token ids on the first
// virtual stage) and, without recompute, the chunk's whole Activations. With recompute a slot
// holds only the input, and each chunk owns one Activations working set: a backward whose
// microbatch is not the working set's last forward first runs that forward again from the slot's
// input (bitwise the same activations), so the last stage of 1F1B, whose backwards directly
// follow their forwards, recomputes nothing.
// A split backward (zero-bubble schedules) gives the slot back at I, having filled a buffer of
// everything W reads (model/gpt.cuh's WeightGradientInputs) from the chunk's second pool, which W
// gives back: between a microbatch's I and its W the stage holds that buffer, not its slot. W
// never recomputes.
// Gradients between stages, and (with recompute) outputs waiting for their send, live in small
// transfer pools of B T C elements, planned the same way. Each transfer group takes its receive
// buffers and gives back its send buffers itself, so a group's buffers live exactly from the
// compute that fills them to the compute (or the group) that empties them.
//
// Streams. Computes run on the caller's stream, transfer groups on the executor's transfer
// stream, each ordered against the other by the step events with only the dependencies it has:
// a group waits for the last compute that used one of its buffers (the compute that produced a
// send's data, the last reader of a receive's reused buffer), and a compute for the last group
// that used one of its buffers (the receive of its input, or the send still reading a buffer it
// is about to write); each buffer remembers those steps (pipeline/buffer_pool.h). So a group is
// posted as soon as its own data is ready, whatever computes the host has queued after it, and a
// compute waits for no group it does not read from or write over. The walk begins with the
// transfer stream waiting for the compute stream (what came before the step) and ends with the
// compute stream waiting for the transfer stream, so a caller's one wait on its stream covers both.
// An overlapped pair (pipeline/action.h, DualPipeV's F7&B3.1) runs its backward on a second compute
// stream, created only for a schedule with pairs, with its own cuBLAS handle and workspace (a
// handle is bound to one stream, and a workspace must not serve two streams at once): the backward
// waits for the caller's stream as it stood before the pair's forward and for its own transfers,
// runs beside the forward, and the caller's stream waits for it before the next step, so the
// caller's one wait still covers every stream. The forward stays on the caller's stream, and so
// does the backward that is its chunk's last B (its layer reports mark gradients final there).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "comm/groups.h"
#include "model/gpt.cuh"
#include "pipeline/executor_state.h"
#include "pipeline/schedule.h"

// What schedule_position found.
struct SchedulePosition {
  unsigned long long walk;  // the walks count: any change means the executor moved on
  int step;                 // within execute_step: the schedule step the device is in (index into
                            // the schedule); -1 outside it (between steps, or a forward-only pass)
};
// Safe to call from any thread while the executor runs (not while it is created or destroyed).
template <typename Element>
SchedulePosition schedule_position(const Executor<Element>& executor);

// chunk_ranges[c] is chunk c of this stage (split_layers' entry placement.virtual_stage(stage, c)).
// Allocates everything a step and a forward-only pass use: the pools at the schedule's peaks (the
// slots, weight-gradient inputs and transfer buffers), the scratch, the working sets (recompute),
// the events and the transfer stream. With TRAIN_TRANSFERS_IN_COMPUTE_STREAM=1 in the environment the
// transfers run on stream itself, one after the other with the computes (no overlap: for comparison).
// With groups.mesh.tp > 1 every chunk runs on the stage's tp group (model/gpt.cuh's TensorParallelRun),
// its activations and scratch sized for the rank's shard; the messages between stages are the
// whole B T C activations, exchanged between the stages' ranks of the same tp_rank (the pipeline
// communicator's). With sequence_parallel (tp > 1, tp dividing every T) they are the rank's
// sequence shard, B T C / tp (model/gpt_sequence_parallel.cu). plan_executor's tp and
// sequence_parallel size the same buffers.
// The executor create_executor makes, without the device: its pools planned (their buffer counts,
// the schedule's peaks) and nothing allocated, no stream, no event. For the memory plan
// (pipeline/memory_plan.h), which so counts the buffers create_executor allocates.
template <typename Element>
Executor<Element> plan_executor(const GPTConfig& config, int B, int T, const StageSchedule& schedule,
                                const std::vector<LayerRange>& chunk_ranges, const Placement& placement, int stage,
                                bool recompute, AttentionKind attention = AttentionKind::materialized, int tp = 1,
                                bool sequence_parallel = false);
template <typename Element>
Executor<Element> create_executor(const GPTConfig& config, int B, int T, const StageSchedule& schedule,
                                  const std::vector<LayerRange>& chunk_ranges, const Placement& placement,
                                  int stage, bool recompute, const CommGroups& groups, cublasHandle_t cublas,
                                  cudaStream_t stream, AttentionKind attention = AttentionKind::materialized,
                                  bool sequence_parallel = false);
template <typename Element>
void destroy_executor(Executor<Element>& executor);

// Queues one training step's schedule over the microbatches whose tokens and targets are
// host_tokens/host_targets (m, B, T) (the first virtual stage reads the tokens, the last the
// targets), microbatch k at T_k = shape.lengths[k] (docs/pipeline.md, "Microbatches of different
// lengths"): its (B, T_k) row-major at the start of its B T block. Every forward, backward,
// recompute and message of microbatch k runs at T_k, in buffers sized for the executor's T: a
// message is B T_k C elements, and both of its ends know T_k from the schedule's microbatch index,
// since every rank is given the whole step's lengths. params[c] and grads[c] are chunk c's views
// (model/parameter_layout.h). Parameter gradients accumulate (+=) into grads, the tied head's share
// of wte's into grad_wte_head (nullptr on a stage without the head), every loss scaled by
// shape.loss_scale. executor.loss_sum (device) becomes, on the stage with the head, the sum over
// the microbatches of their loss sums each divided by shape.loss_divisor, else 0. Throws (one line)
// for a length outside [1, T] or lengths that do not cover the schedule's microbatches. Does not
// wait for the device: the caller waits once for its whole step, then calls finish_step.
// An executor that enable_pipedream (pipeline/pipedream_walk.h) made run PipeDream's asynchronous
// pipeline walks the run's next step instead, whose microbatches are numbered over the run: the
// data's microbatch 0 is its first, and stage 0 reads up to p - 1 after the step's m.
template <typename Element>
void execute_step(Executor<Element>& executor, const std::vector<ParameterTensors<Element>>& params,
                  const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head,
                  const int* host_tokens, const int* host_targets, const StepShape& shape);
// After the stream has run the last execute_step (the caller has waited for it): updates the
// accounting (its times) and ends the walk that schedule_position reports.
template <typename Element>
void finish_step(Executor<Element>& executor);

// Records the origin of the next execute_step's timeline on the stream: the accounting's
// step_start_ms are measured from it. A caller that records it on every rank right after a barrier,
// on an idle stream, gets timelines whose clocks agree across ranks (trainer/program/measured_timeline.h).
template <typename Element>
void mark_timeline_origin(Executor<Element>& executor);

// A forward of one microbatch of B' <= B sequences of T' <= T tokens through the whole
// pipeline, chunk after chunk (validation, sampling), params as for execute_step. host_targets
// may be null (no loss).
template <typename Element>
struct ForwardResult {
  double loss;            // the mean loss (stage with the head and targets given), else 0
  const Element* logits;  // (B', T', Vp) on the device, on the stage with the head, else nullptr;
                          // valid until the executor's next call
};
template <typename Element>
ForwardResult<Element> execute_forward(Executor<Element>& executor,
                                       const std::vector<ParameterTensors<Element>>& params, const int* host_tokens,
                                       const int* host_targets, int B, int T);

// A trace as one line, steps joined by "; ".
std::string trace_text(const std::vector<ExecutedStep>& trace);
