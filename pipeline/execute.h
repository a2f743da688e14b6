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
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/groups.h"
#include "model/gpt.cuh"
#include "pipeline/buffer_pool.h"
#include "pipeline/schedule.h"

// One chunk's microbatch slots and, with recompute, its working set.
template <typename Element>
struct ChunkState {
  LayerRange range;
  BufferPool inputs;                       // the slots' inputs (stage_input_bytes)
  std::vector<Activations<Element>> acts;  // without recompute: the slots' activations, parallel to inputs.buffers
  Activations<Element> working;            // with recompute: the one working set
  int working_microbatch;                  // whose forward the working set holds; -1: none
  BackwardScratch<Element> scratch;
  BufferPool weight_pool;                                    // split backwards: what W reads, from I to W
  std::vector<WeightGradientInputs<Element>> weight_inputs;  // parallel to weight_pool.buffers
};

// What one executed schedule step used, recorded by the function that ran it from the values
// it computed with, so a test can check the executor against the schedule (not the schedule
// against itself). Buffers are indices into their pool.
struct ExecutedMessage {
  ActionKind kind;        // send_forward, recv_forward, send_backward or recv_backward
  int microbatch, chunk;  // whose activation or gradient
  int peer;               // the pipeline rank at the other end
  int buffer;             // rF, and sF without recompute: the chunk's slot; sF with recompute: the send
                          // buffer; sB: the input-gradient buffer; rB: the output-gradient buffer
};
struct ExecutedStep {
  bool compute;           // F, B, I or W, else a group of messages
  ActionKind kind;        // compute: forward, backward, backward_input or backward_weight
  int microbatch, chunk;  // compute: what it ran on
  int slot;               // F, B, I: the chunk's slot it read (and a forward wrote); W: -1
  int output_buffer;      // forward: where its output went for the hand-over, the next chunk's slot
                          // (a local hand-over) or a send buffer (recompute), else -1
  int weight_inputs;      // I: the weight-gradient-input buffer it filled; W: the one it read; else -1
  bool recomputed;        // B and I: ran its forward again first
  std::vector<ExecutedMessage> messages;  // transfer: in the order posted
};
// "F3@c0 slot 1", "F3@c0 slot 1 output 0" (its output_buffer), "B3@c0 slot 1 (recomputed)",
// "I3@c0 slot 1 w 0", "W3@c0 w 0", "sF3@c0->2 buffer 1 + rB1@c0<-2 buffer 0" (to stage 2, from stage 2).
std::string to_text(const ExecutedStep& step);

// What the executor measured and allocated.
struct ExecutorAccounting {
  std::vector<int> slots;           // per chunk: activation slots allocated
  std::vector<size_t> slot_bytes;   // per chunk: bytes of one slot (input, plus activations without recompute)
  std::vector<int> weight_buffers;  // per chunk: weight-gradient-input buffers allocated (split backwards)
  std::vector<size_t> weight_buffer_bytes;  // per chunk: bytes of one
  size_t working_set_bytes;         // the chunks' working sets (recompute), else 0
  // slots x slot bytes + weight buffers x their bytes + working sets: the stage's peak activation memory
  size_t activation_bytes;
  size_t transfer_bytes;            // the gradient and send buffers
  std::vector<float> step_ms;       // the last step: each schedule step's time
  // The last step, when mark_timeline_origin preceded it: each schedule step's start and end after
  // the origin, a compute's on the compute stream (after its waits), a group's on the transfer
  // stream (from its posting, after its waits, to its completion). Computes never overlap one
  // another, nor groups; a group may overlap the computes after it. Else empty.
  std::vector<float> step_start_ms, step_end_ms;
  double busy_ms;                   // the last step: time in F, B, I and W
  double span_ms;                   // the last step: from its earliest step's start to its latest's end
};

// Where the executor is, for a watchdog on another thread (what watches a run belongs to the
// trainer; the executor only publishes). The host queues a step's schedule on the streams long
// before the device has run it, so the step the device is in is the first queued schedule step
// whose end event has not completed (a group still in flight on the transfer stream while the
// computes after it have run, e.g. a send whose receiver is stuck, is that step):
// schedule_position asks the events. The executor holds the mutex while it records a step's
// events and counts it queued, so that a query never meets an event being recorded again.
struct ExecutorProgress {
  std::mutex mutex;
  unsigned long long walks = 0;  // execute_step and execute_forward calls begun
  bool walking = false;          // within execute_step
  int queued = 0;                // the current execute_step's schedule steps queued on the stream
};

template <typename Element>
struct Executor {
  GPTConfig config;
  int B, T;  // the largest microbatch
  int p, v, stage;
  Placement placement;  // where each virtual stage lives (the schedule's)
  bool recompute;
  StageSchedule schedule;
  CommGroups groups;  // the pipeline's communicator (none needed when p == 1)
  cublasHandle_t cublas;
  cudaStream_t stream;           // the compute stream (the caller's)
  cudaStream_t transfer_stream;  // the executor's own, or stream itself (see create_executor)
  std::vector<ChunkState<Element>> chunks;  // index = chunk c, virtual stage placement.virtual_stage(stage, c)
  BufferPool sends;                // recompute: forward outputs waiting for their send
  BufferPool grad_outputs;         // gradients of chunk outputs, received or handed over locally
  BufferPool grad_inputs;          // gradients of chunk inputs waiting for their send
  int* targets;                    // (B, T) the head's targets of the current forward
  double* loss_sum;                // (1) execute_step's sum of the microbatches' mean losses (head), else 0
  std::vector<cudaEvent_t> step_start, step_end;  // one pair per schedule step, on the stream that runs it
  cudaEvent_t origin;                              // mark_timeline_origin's
  cudaEvent_t compute_ready, transfers_done;       // one stream's work so far, for the other to wait for
  bool origin_marked;                              // for the next execute_step
  std::vector<ExecutedStep> trace;  // the last step's executed steps, one per schedule step
  // Called while execute_step queues the step, with (chunk, layer) once the layer's parameter
  // gradients are final (queued by the chunk's last B or W of the schedule), then with (chunk, -1)
  // once that B or W is queued whole (wpe, lnfw, lnfb). Set by the owner; empty: not called.
  std::function<void(int chunk, int layer)> gradients_final;
  std::vector<int> last_gradient_step;  // per chunk: the schedule index of its last B or W; -1: none
  ExecutorAccounting accounting;
  std::shared_ptr<ExecutorProgress> progress;  // shared with whoever watches
};

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
template <typename Element>
Executor<Element> create_executor(const GPTConfig& config, int B, int T, const StageSchedule& schedule,
                                  const std::vector<LayerRange>& chunk_ranges, const Placement& placement,
                                  int stage, bool recompute, const CommGroups& groups, cublasHandle_t cublas,
                                  cudaStream_t stream);
template <typename Element>
void destroy_executor(Executor<Element>& executor);

// Queues one training step's schedule over the microbatches whose tokens and targets are
// host_tokens/host_targets (m, B, T) (the first virtual stage reads the tokens, the last the
// targets). params[c] and grads[c] are chunk c's views (model/parameter_layout.h). Parameter
// gradients accumulate (+=) into grads, the tied head's share of wte's into grad_wte_head
// (nullptr on a stage without the head), every loss scaled by loss_scale. executor.loss_sum (device)
// becomes the sum over the microbatches of their mean losses on the stage with the head, else 0.
// Does not wait for the device: the caller waits once for its whole step, then calls finish_step.
template <typename Element>
void execute_step(Executor<Element>& executor, const std::vector<ParameterTensors<Element>>& params,
                  const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head,
                  const int* host_tokens, const int* host_targets, double loss_scale);
// After the stream has run the last execute_step (the caller has waited for it): updates the
// accounting (its times) and ends the walk that schedule_position reports.
template <typename Element>
void finish_step(Executor<Element>& executor);

// Records the origin of the next execute_step's timeline on the stream: the accounting's
// step_start_ms are measured from it. A caller that records it on every rank right after a barrier,
// on an idle stream, gets timelines whose clocks agree across ranks (trainer/measured_timeline.h).
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
