// What an executor holds (pipeline/execute.h says how it walks a schedule): each chunk's slots
// and working set, the trace of executed steps, the accounting and the progress a watchdog reads.
// Its own header, so that the executor's walk (execute.cu) and its steps (execute_steps.cu) both
// use it without including each other.
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
#include "pipeline/pipedream_run.h"
#include "pipeline/schedule.h"

// One training step's shape (issue 34): each microbatch's T, and how its losses are normalised.
// A step at fixed length has every T at the executor's and no padding: loss_scale 1 / (B T m dp),
// loss_divisor B T (each microbatch's mean, today's sum). A step with padding (target -1) has
// loss_scale 1 / its real targets over all microbatches of all replicas, the same on every stage
// and replica, and loss_divisor 1 (the plain sums, which the caller divides by the real targets:
// its loss is then their mean, however they are split into microbatches). PipeDream's step
// (trainer/step/pipedream_step.cpp) holds several updates, each the mean over its own microbatches'
// real targets: loss_scales gives each microbatch its update's scale.
struct StepShape {
  std::vector<int> lengths;  // (m) microbatch k's T, in [1, the executor's T]
  double loss_scale;
  double loss_divisor;
  std::vector<double> loss_scales;  // (m) microbatch k's scale in place of loss_scale; empty: loss_scale for all
};

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
  int peer;               // the pipeline rank at the other end, as exchange_group gave it to NCCL
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
  int stream;             // compute: 0 the caller's stream, 1 the second compute stream (a pair's backward)
  std::vector<ExecutedMessage> messages;  // transfer: in the order posted
};
// "F3@c0 slot 1", "F3@c0 slot 1 output 0" (its output_buffer), "B3@c0 slot 1 (recomputed)",
// "I3@c0 slot 1 w 0", "W3@c0 w 0", "sF3@c0->2 buffer 1 + rB1@c0<-2 buffer 0" (to stage 2, from stage 2).
std::string to_text(const ExecutedStep& step);

// A stream that runs computes and the cuBLAS handle bound to it (kernels/gemm.cuh's bind_cublas):
// a handle runs its GEMMs on one stream, and its workspace may serve one stream only.
struct ComputeStream {
  cudaStream_t stream;
  cublasHandle_t cublas;
};

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
  // the origin, a compute's on its compute stream (after its waits), a group's on the transfer
  // stream (from its posting, after its waits, to its completion). Computes overlap one another
  // only in an overlapped pair, groups never; a group may overlap the computes after it. Else empty.
  std::vector<float> step_start_ms, step_end_ms;
  double busy_ms;                   // the last step: time in F, B, I and W
  double span_ms;                   // the last step: from its earliest step's start to its latest's end
  int pairs_overlapped;             // the last step: overlapped pairs whose two computes were measured in
                                    // flight at once (each started before the other ended)
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
  AttentionKind attention;  // the model's attention (model/gpt.cuh): it sizes the slots and the scratch
  int tp;                   // tensor-parallel ranks of the stage: the activations and scratch are the rank's shard's
  bool sequence_parallel;   // tp > 1 only: the residual stream and the messages are the rank's B T / tp rows
  TensorParallelRun tensor_parallel;  // what every chunk's forward and backward run with (tp = 1: none)
  // Into how many shards a message's B T rows are cut: tp with sequence parallelism, else 1.
  int sequence_shards() const { return sequence_parallel ? tp : 1; }
  // The copy of groups that tensor_parallel points to, on the heap: the executor is returned and
  // stored by value, which would leave a pointer to its own member dangling.
  std::shared_ptr<const CommGroups> tensor_parallel_groups;
  StageSchedule schedule;
  CommGroups groups;  // the pipeline's communicator (none needed when p == 1)
  cublasHandle_t cublas;
  cudaStream_t stream;           // the compute stream (the caller's)
  cudaStream_t transfer_stream;  // the executor's own, or stream itself (see create_executor)
  // The second compute stream, where an overlapped pair's backward (pipeline/action.h) runs beside
  // its forward, with a cuBLAS handle and workspace of its own (pair_workspace, cublas_workspace_bytes,
  // counted by the memory plan); created only when the stage's schedule has a pair, else {nullptr, nullptr}.
  ComputeStream pair_backwards;
  void* pair_workspace;
  cudaEvent_t pair_start;  // the caller's stream before a pair's forward, for its backward to start from
  std::vector<ChunkState<Element>> chunks;  // index = chunk c, virtual stage placement.virtual_stage(stage, c)
  BufferPool sends;                // recompute: forward outputs waiting for their send
  BufferPool grad_outputs;         // gradients of chunk outputs, received or handed over locally
  BufferPool grad_inputs;          // gradients of chunk inputs waiting for their send
  StepShape shape;                 // the current execute_step's (its lengths' capacity kept: no allocation)
  int first_microbatch;            // the schedule's index of the step's microbatch 0 (pipedream's run-long
                                   // numbering; else 0): microbatch k's data and length are k - first_microbatch's
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
  // Called while execute_step queues compute step i, after its waits and its start event and before
  // its kernels, with (i, the stream they go on). Set by a test that holds a stream there with a host
  // function (tests/mpi/overlapped_pair_test.cu); empty: not called.
  std::function<void(int step, cudaStream_t stream)> before_compute;
  ExecutorAccounting accounting;
  std::shared_ptr<ExecutorProgress> progress;  // shared with whoever watches
  // The asynchronous pipeline's run (pipeline/pipedream_walk.h); null for every other schedule.
  std::shared_ptr<PipeDreamRun<Element>> pipedream;
};
