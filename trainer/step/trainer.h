// One pipeline stage of one data-parallel replica on the device: this rank's parameters and
// gradients (those of the stage's own tensors only), its executor (pipeline/execute.h) and
// optimizer, and what a training run does with them: an optimizer step over the step's
// microbatches, the validation loss, the next-token logits for sampling, and the full model
// gathered for checkpoints. The single-process trainer is the case pp = dp = 1 of the same code.
// Element is the type of the parameters, gradients, activations and messages: float, or bf16
// (llm.c's mixed precision: fp32 moments, fp32 master weights unless switched off, stochastic
// rounding; trainer/step/optimizer.h). Whatever the element type, the host sees the model as fp32
// values in llm.c's layout: uploads round them to nearest bf16, downloads widen bf16 exactly.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/groups.h"
#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"
#include "model/parameters.h"
#include "model/parameters_pending.h"
#include "pipeline/execute.h"
#include "pipeline/memory_plan.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_file.h"
#include "trainer/command_line/options.h"
#include "trainer/data/data.h"
#include "trainer/data/documents.h"
#include "comm/data_parallel_sum.h"
#include "trainer/step/stage_record.h"
#include "trainer/step/optimizer.h"
#include "trainer/step/pipedream_updates.h"
#include "comm/host_exchange.h"

// --schedule pipedream (pipeline/pipedream.h): its rule, and the run's steps, on which its lists depend.
struct PipeDreamLayout {
  PipeDreamRule rule;
  int steps;
  std::vector<int> drains = {};  // the steps after which it drains for --save-every (pipeline/pipedream.h)
};

// How the model is cut and scheduled (the mesh, dp x pp, is in the CommGroups).
struct PipelineLayout {
  ScheduleKind schedule;
  int microbatches;    // per replica and optimizer step
  int virtual_stages;  // chunks per stage (interleaved; zb-v runs 2 whatever it says)
  bool recompute;
  std::vector<int> layers_per_stage;  // empty: split_layers' even split
  std::optional<ScheduleGrid> schedule_file = {};  // --schedule-file's grid, run instead of `schedule`
  int microbatch_group = 0;  // interleaved's N, microbatches each chunk runs in a row (pipeline/interleaved.h); 0: pp
  std::string pipeline_layout = {};  // --pipeline-layout (pipeline/layout_string.h); empty: layers_per_stage
  bool zero = false;  // --zero 1: with dp > 1, ZeRO-1's optimizer-state shards (model/optimizer_shards.h)
  AttentionKind attention = AttentionKind::materialized;  // --attention: sizes the activation slots and the scratch
  bool sequence_parallel = false;  // --sequence-parallel: the residual stream and messages are B T / tp rows a tp rank
  // --schedule pipedream: the run's lists instead of `schedule`'s (which is then 1f1b, the split it runs)
  std::optional<PipeDreamLayout> pipedream = {};
};

// The layout the options ask for (--schedule, --microbatches, --virtual-stages, --recompute,
// --layers-per-stage, --schedule-file's grid, read and checked, --microbatch-group, --pipeline-layout, --zero,
// --attention: auto is the fused attention where its kernels take the model's heads, else the
// materialised one; fused with heads they do not take throws one line).
PipelineLayout layout_from_options(const TrainOptions& options, const GPTConfig& config);

// The layout's schedule on pp stages: the built-in one, or the file's grid checked and lowered
// (pipeline/schedule_file.h). Throws std::runtime_error saying what does not fit.
PipelineSchedule layout_schedule(const PipelineLayout& layout, int pp);

// What a training step copies back to the host, once, at its end: this rank's loss sum, the
// global norm, and the device's decision (kernels/adamw.cuh).
struct StepFigures {
  double loss_sum;
  double norm;
  AdamWGate gate;
};

template <typename Element>
struct Trainer {
  GPTConfig config;
  int B, T;          // sequences per microbatch, tokens per sequence
  int microbatches;  // per replica and optimizer step
  World world;  // the mesh's world (host-side sums and gathers); of one for a mesh of one
  CommGroups groups;                     // the mesh, and the communicators when pp dp > 1
  Placement placement;                     // where each virtual stage lives (the schedule's)
  std::vector<LayerRange> virtual_stages;  // split_layers: every stage's chunks, index placement.virtual_stage(s, c)
  std::vector<LayerRange> chunks;          // this stage's
  cudaStream_t stream;
  cublasHandle_t cublas;   // bound to stream and to cublas_workspace (kernels/gemm.cuh's bind_cublas)
  void* cublas_workspace;  // the GEMMs' workspace, an item of the memory plan
  ParameterLayout parameter_layout;  // where this stage's tensors live (model/parameter_layout.h)
  Element* parameter_memory;         // (parameter_layout.size) the stage's parameters
  Element* gradient_memory;          // (parameter_layout.size) their gradients
  Element* grad_wte_head;  // (Vp, C) the tied output projection's share of wte's gradient; nullptr without the head
  std::vector<ParameterTensors<Element>> params;  // chunk c's views of parameter_memory
  std::vector<ParameterTensors<Element>> grads;   // and of gradient_memory
  Executor<Element> executor;
  GradientBuckets buckets;  // the data-parallel sum (dp > 1), started while the backward goes on
  std::shared_ptr<ParametersPending> pending;  // what the forwards wait for (ZeRO-1's all-gather); params point to it
  Optimizer optimizer;  // fp32 moments; with bf16 parameters the master weights and the rounding seed
  StepFigures* figures;  // (1) pinned host memory: what a step copies back at its end
  // Pinned host memory (cudaMallocHost), which a copy reads in stream order without the host
  // waiting; CUDA may make a copy from pageable memory above 64 KB wait ("API synchronization
  // behavior"). The host writes them only between steps, after its wait.
  int* host_tokens;                // (microbatches, B, T): microbatch k's (B, T_k) at the start of its block;
                                   // pipedream: microbatches + pp - 1 of them (stage 0 reads ahead)
  int* host_targets;               // (the same count, B, T)
  StepShape shape;                 // the current step's lengths and loss normalisation (pipeline/executor_state.h)
  std::vector<float> host_logits;  // (Vp) one row of logits, for sampling
  std::shared_ptr<TrainerPipeDreamUpdates<Element>> pipedream;  // --schedule pipedream's updates; else null
  std::vector<double> pipedream_sums;  // (3 + pp) what pipedream_step sums over the world, sized once
  // pipedream_step's real targets of each update of a step's microbatches and those read ahead, over
  // every replica ((m + pp - 1) / K rounded up, sized once).
  std::vector<double> pipedream_update_real;
  // The run's sequence-length warm-up (max 0: none, every step at T): pipedream reads microbatches
  // of the next steps ahead, each at its own step's cap (pipedream_cap).
  SeqLenWarmup warmup = {0, 0, 0, 1};
};

// Checks the layout against the mesh and the model without communicating (throws: too few
// layers, a --layers-per-stage or --pipeline-layout that does not fit, a schedule that does not
// fit m, a schedule file that does not check). Returns split_layers' ranges.
std::vector<LayerRange> check_layout(const GPTConfig& config, const Mesh& mesh, const PipelineLayout& layout);

// What the memory plan (pipeline/memory_plan.h) needs to plan this layout on this mesh: the
// schedule and layer split the trainer would run (throws as check_layout does).
MemoryPlanInput memory_plan_input(const GPTConfig& config, int B, int T, const PipelineLayout& layout, const Mesh& mesh,
                                  bool bf16, const MixedPrecision& precision);

// Allocates everything once, before step 1 (the executor's pools at its schedule's peaks, the
// pinned host buffers), and connects every communicator of groups (comm/connect.h): no step,
// validation or sample allocates or connects. Parameters are uninitialised until
// upload_parameters. groups stay the caller's. Throws when what it allocated is not its stage's
// memory plan to the byte. precision is for bf16 parameters (an fp32
// trainer has no master weights and does not round).
template <typename Element>
Trainer<Element> create_trainer(const GPTConfig& config, int B, int T, const PipelineLayout& layout,
                                const CommGroups& groups, const MixedPrecision& precision = {});
// The single process (pp = dp = 1, 1f1b, no recompute): the model as one stage.
template <typename Element>
Trainer<Element> create_trainer(const GPTConfig& config, int B, int T, int microbatches,
                                const MixedPrecision& precision = {});
template <typename Element>
void destroy_trainer(Trainer<Element>& trainer);

// The whole model (num_parameters(config) values in llm.c's layout): each rank's device gets its
// stage's regions of it, rounded to nearest for bf16 parameters, whose master weights become
// the rounded values, widened.
template <typename Element>
void upload_parameters(Trainer<Element>& trainer, const std::vector<float>& parameters);
// The same for the AdamW moments (a resumed run's); with ZeRO-1 each replica keeps its shard's.
template <typename Element>
void upload_moments(Trainer<Element>& trainer, const std::vector<float>& m, const std::vector<float>& v);
// The same for the master weights (a resumed bf16 run's), after upload_parameters.
template <typename Element>
void upload_master_weights(Trainer<Element>& trainer, const std::vector<float>& master);
// This stage's parameters in llm.c's layout of the whole model, widened to float (exact), zeros
// outside the stage's regions (trainer/checkpoints/gather_model.h brings the stages together).
template <typename Element>
std::vector<float> download_parameters(const Trainer<Element>& trainer);
// The same for the AdamW moments (with ZeRO-1 the replica's shard's, zeros elsewhere).
template <typename Element>
void download_moments(const Trainer<Element>& trainer, std::vector<float>& m, std::vector<float>& v);
// The same for the master weights; empty when the trainer has none.
template <typename Element>
std::vector<float> download_master_weights(const Trainer<Element>& trainer);
// The regions of the whole model that stage `stage` of a replica holds (its chunks' tensors).
template <typename Element>
std::vector<ParameterRegion> stage_regions(const Trainer<Element>& trainer, int stage);
// This stage's gradients (after a step, that step's) in llm.c's layout of the whole model, zeros
// outside the stage's regions.
template <typename Element>
std::vector<float> download_gradients(const Trainer<Element>& trainer);

struct StepResult {
  double loss;       // the mean of the step's microbatch losses over all replicas (every rank)
  double grad_norm;  // the global gradient norm before clipping
  bool has_norm = true;  // false: not computed (--schedule pipedream without --vertical-sync)
  std::vector<StageRecord> stages;  // on world rank 0: replica 0's stages, in order
  // The non-finite guard: a step whose loss or norm is not finite (the same on every rank and
  // every layout) is not applied: no rank changes its parameters or moments.
  bool applied = true;
  std::string skipped;  // why not (trainer/safety/nonfinite.h), else empty
  // Why the run cannot go on (one line, the same on every rank): pipedream without vertical sync
  // after a stage skipped a non-finite update the others could not; else empty.
  std::string stop;
  int stop_signal = 0;  // a stop signal any rank had received when the step's losses were summed
                        // (trainer/safety/preemption.h: SIGINT over SIGTERM), else 0
  double real_tokens = 0;  // the step's targets other than -1, over all replicas (every rank)
  double positions = 0;    // the step's positions computed, B T_k summed over all replicas' microbatches
};

// Optimizer step t (1, 2, ...): zeroes the gradients; runs the schedule over this replica's
// microbatches of the step (replica r reads the step's microbatches r m .. r m + m - 1 of reader;
// the reader advances by dp m), each loss scaled by 1 / (B T m dp) so that the summed gradient is
// that of the step's mean loss; adds the tied embedding's two shares, sums the replicas'
// gradients; then AdamW with clipping, unless the loss or the norm is not finite. All of it is
// queued on the device, the losses summed, the norm, the clipping factor and the decision made
// there: the host waits once, at the end, to copy back the step's figures (StepFigures). The
// loss sum over the ranks (on the host, after that wait) also carries each rank's
// received_stop_signal.
template <typename Element>
StepResult train_step(Trainer<Element>& trainer, BatchReader& reader, const AdamWSettings& settings,
                      double learning_rate, int t);

// The same step with packed sequences cut to cap <= T tokens (the sequence-length warm-up without
// --documents): each sequence of the window keeps its first cap tokens, every microbatch at T = cap
// and each loss scaled by 1 / (B cap m dp). cap = T is the step above, bitwise. Throws (one line) for
// a cap of 0 or above T.
template <typename Element>
StepResult train_step(Trainer<Element>& trainer, BatchReader& reader, size_t cap, const AdamWSettings& settings,
                      double learning_rate, int t);
// --schedule pipedream's step t (trainer/step/pipedream_step.cpp; train_step's front ends call it):
// reads the step's m microbatches and the p - 1 after them (stage 0's forwards run ahead; the reader
// advances by m), microbatch k of step j at pipedream_cap(j)'s T (with documents, its own T_k up to
// it), each loss scaled by 1 / the real targets of its update's K dp microbatches, and runs the
// step's part of the run, whose updates the executor queues (pipeline/pipedream_walk.h). loss: as
// the synchronous step's, packed the mean of the step's microbatch losses, with documents their
// loss sums over the step's real targets (the head stage runs each microbatch's forward in its own
// step, with the version docs/pipeline.md's rule gives). With vertical sync grad_norm is the norm of the last update decided in the step
// (t m / K, the step's last, but in the last step the run's last, the cool-down's being decided at
// the run's end: pipeline/pipedream_run.h), and a step is not applied when an update decided in it
// was skipped on every stage (skipped names the first); has_norm is false when none was decided.
// Without vertical sync there is no norm; each stage gates its own updates by their gradients, and
// when one skipped an update the step is not applied, skipped and stop name the first (the lowest
// update, then stage). The stages' records and the stop signals as train_step's.
template <typename Element, typename Reader>  // BatchReader or DocumentReader
StepResult pipedream_step(Trainer<Element>& trainer, Reader& reader, const AdamWSettings& settings,
                          double learning_rate, int t);
// The cap of step `step` + 1 (from 0) with pipedream: trainer.warmup's, or T without one.
template <typename Element>
size_t pipedream_cap(const Trainer<Element>& trainer, uint64_t step);
// A packed microbatch (B, T) cut to each row's first cap tokens, its rows packed to (B, cap).
void cut_rows_to(size_t cap, size_t B, size_t T, int* tokens, int* targets);
// create_trainer's last part for a pipedream layout: the updates (the head's ring allocated) and
// the executor made to run the run (its stashes allocated).
template <typename Element>
void enable_pipedream_updates(Trainer<Element>& trainer, const PipeDreamLayout& layout);

// The step whose microbatches the caller has put in host_tokens and host_targets at trainer.shape
// (train_step's front ends, trainer/step/step_batches.cpp): the schedule, the gradients' sums,
// the update; the loss is the world's sum of the head stages' loss sums over loss_denominator.
template <typename Element>
StepResult run_step(Trainer<Element>& trainer, const AdamWSettings& settings, double learning_rate, int t,
                    double loss_denominator);

// The same step over document-aligned microbatches (trainer/data/documents.h) read at cap <= T:
// replica r reads the step's microbatches r m .. r m + m - 1, each at its own T_k; every rank
// computes every T_k and the step's real targets N from the data position, and every loss is
// scaled by 1 / N, so that the step's loss (the microbatches' loss sums over N) and gradient are
// the mean over its real tokens, whatever the layout. Throws (one line) for a cap of 0 or above T.
template <typename Element>
StepResult train_step(Trainer<Element>& trainer, DocumentReader& reader, size_t cap, const AdamWSettings& settings,
                      double learning_rate, int t);

// The mean loss of the first `batches` microbatches of reader (read from position 0; the
// reader's position is left where it was), forward only; on every rank.
template <typename Element>
double validation_loss(Trainer<Element>& trainer, BatchReader& reader, int batches);

// The logits (V, the padding dropped) of the token after context (count <= T tokens), from a
// forward of one sequence of count tokens, on every rank. The reference lives until the next call.
template <typename Element>
const std::vector<float>& next_token_logits(Trainer<Element>& trainer, const int* context, int count);
