// One pipeline stage on the device and its training step (trainer/step/trainer.h).
#include "trainer/step/trainer.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "comm/collectives.h"
#include "comm/connect.h"
#include "comm/nccl_types.h"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/fused_attention.cuh"
#include "kernels/gemm.cuh"
#include "model/gradient_buckets.h"
#include "model/optimizer_shards.h"
#include "pipeline/layer_split.h"
#include "pipeline/layout_string.h"
#include "pipeline/pytorch_csv.h"
#include "trainer/safety/failure_injection.h"
#include "trainer/safety/nonfinite.h"
#include "trainer/safety/preemption.h"

namespace {

bool has_embedding(const std::vector<LayerRange>& chunks) {
  for (const LayerRange& range : chunks)
    if (range.has_embedding) return true;
  return false;
}

bool has_head(const std::vector<LayerRange>& chunks) {
  for (const LayerRange& range : chunks)
    if (range.has_head) return true;
  return false;
}

// wte's elements on a rank: its tp rank's Vp / tp rows (model/tensor_parallel_shard.h), all of them at tp = 1.
size_t wte_size(const GPTConfig& config, int tp) { return size_t(config.padded_vocab_size / tp) * config.channels; }

// The stage's wte (in parameters or gradients), or nullptr on a stage with neither embedding nor head.
template <typename Element>
Element* wte_of(const Trainer<Element>& trainer, Element* memory) {
  for (const ParameterRegion& r : trainer.parameter_layout.regions)
    if (r.tensor == kWte) return memory + r.offset;
  return nullptr;
}

// A stage allocation of T (float or bf16, device) in llm.c's layout on the host, widened to
// float (exact), zeros outside the stage's regions. With `shard` (the optimizer's state), memory
// holds only the stage's elements [shard.begin, shard.end), and the rest is zeros too.
template <typename Element, typename T>
std::vector<float> download_full_layout(const Trainer<Element>& trainer, const T* memory,
                                        const OptimizerShard* shard = nullptr) {
  std::vector<T> stage(trainer.parameter_layout.size, from_compute<T>(0.0f));
  const size_t first = shard ? shard->begin : 0, end = shard ? shard->end : stage.size();
  CUDA_CHECK(cudaMemcpy(stage.data() + first, memory, (end - first) * sizeof(T), cudaMemcpyDeviceToHost));
  return to_full_layout(trainer.parameter_layout, std::vector<float>(stage.begin(), stage.end()));
}

// The stage's regions of a whole model (llm.c's layout, host) into a stage allocation of T
// (device), rounded to nearest for bf16; with `shard`, only its elements, from memory's start.
template <typename Element, typename T>
void upload_full_layout(const Trainer<Element>& trainer, T* memory, const std::vector<float>& full,
                        const OptimizerShard* shard = nullptr) {
  const std::vector<float> values = to_stage_layout(trainer.parameter_layout, full);
  const size_t first = shard ? shard->begin : 0, end = shard ? shard->end : values.size();
  std::vector<T> stage(end - first);
  std::transform(values.begin() + first, values.begin() + end, stage.begin(),
                 [](float x) { return from_compute<T>(x); });
  CUDA_CHECK(cudaMemcpy(memory, stage.data(), stage.size() * sizeof(T), cudaMemcpyHostToDevice));
}


// --schedule-file's grid, read and parsed (each rank reads it itself): our grid text or PyTorch's
// CSV, told apart by the content (pipeline/pytorch_csv.h).
ScheduleGrid read_schedule_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("--schedule-file " + path + ": cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << file.rdbuf();
  try {
    return is_pytorch_csv(text.str()) ? parse_pytorch_csv(text.str()) : parse_schedule_grid(text.str());
  } catch (const std::runtime_error& error) {
    throw std::runtime_error("--schedule-file " + path + ": " + error.what());
  }
}

// --attention's choice for the model's heads.
AttentionKind choose_attention(const std::string& option, const GPTConfig& config) {
  const bool takes = fused_attention_takes_heads(config.channels, config.num_heads);
  if (option == "fused" && !takes) {
    throw std::runtime_error("--attention fused: the model's heads have C / NH = " + std::to_string(config.channels) +
                             " / " + std::to_string(config.num_heads) + " channels; the fused kernels take a multiple " +
                             "of 16 up to 128, --attention materialized any");
  }
  return option == "materialized" || !takes ? AttentionKind::materialized : AttentionKind::fused;
}

}  // namespace

PipelineLayout layout_from_options(const TrainOptions& options, const GPTConfig& config) {
  const bool pipedream = options.schedule == "pipedream";  // runs 1f1b's split (trainer.h)
  PipelineLayout layout{pipedream ? ScheduleKind::one_f_one_b : parse_schedule_kind(options.schedule),
                        options.microbatches, options.virtual_stages, options.recompute, options.layers_per_stage};
  if (pipedream)
    layout.pipedream = PipeDreamLayout{{options.update_every, options.weight_stashing == "on", options.vertical_sync},
                                       options.steps, pipedream_drains_every(
                                           {options.save_every, options.val_every, options.sample_every}, 0, options.steps)};
  if (!options.schedule_file.empty()) layout.schedule_file = read_schedule_file(options.schedule_file);
  layout.microbatch_group = options.microbatch_group;
  layout.pipeline_layout = options.pipeline_layout;
  layout.zero = options.zero == 1;
  layout.attention = choose_attention(options.attention, config);
  layout.sequence_parallel = options.sequence_parallel;
  return layout;
}

PipelineSchedule layout_schedule(const PipelineLayout& layout, int pp) {
  if (layout.pipedream) {
    check_pipedream(layout.pipedream->rule, pp, layout.microbatches, layout.pipedream->steps);
    const PipeDreamLayout& run = *layout.pipedream;
    return {Placement{PlacementKind::ring, pp, 1}, pipedream_run_schedules(pp, layout.microbatches, run.steps, run.drains)};
  }
  if (layout.schedule_file) return schedule_from_grid(*layout.schedule_file, pp, layout.microbatches);
  return make_pipeline_schedule(layout.schedule, pp, layout.microbatches, layout.virtual_stages,
                                layout.microbatch_group);
}

MemoryPlanInput memory_plan_input(const GPTConfig& config, int B, int T, const PipelineLayout& layout, const Mesh& mesh,
                                  bool bf16, const MixedPrecision& precision) {
  return MemoryPlanInput{config,
                         B,
                         T,
                         layout.microbatches,
                         mesh.dp,
                         layout_schedule(layout, mesh.pp),
                         check_layout(config, mesh, layout),
                         layout.recompute,
                         bf16,
                         bf16 && precision.master_weights,
                         sizeof(StepFigures),
                         cublas_workspace_bytes(),
                         layout.attention,
                         layout.zero && mesh.dp > 1,
                         mesh.tp,
                         layout.sequence_parallel,
                         layout.pipedream ? std::optional(layout.pipedream->rule) : std::nullopt,
                         layout.pipedream ? layout.pipedream->steps : 0,
                         layout.pipedream ? layout.pipedream->drains : std::vector<int>{}};
}

std::vector<LayerRange> check_layout(const GPTConfig& config, const Mesh& mesh, const PipelineLayout& layout) {
  if (!layout.schedule_file && chunks_per_stage(layout.schedule, 1) == 2 && config.num_layers < 2 * mesh.pp)
    throw std::runtime_error("--schedule " + schedule_name(layout.schedule) + " runs 2 chunks per stage: --layers " + std::to_string(config.num_layers) +
                             " is fewer than 2 x --pp " + std::to_string(mesh.pp) + " = " + std::to_string(2 * mesh.pp) +
                             " pipeline chunks (each needs at least one layer)");
  const PipelineSchedule schedule = layout_schedule(layout, mesh.pp);
  const int v = schedule.placement.v;
  if (layout.pipeline_layout.empty()) return split_layers(config.num_layers, mesh.pp, v, layout.layers_per_stage);
  return split_layers(config.num_layers, mesh.pp, v,
                      pipeline_layout_counts(layout.pipeline_layout, mesh.pp, v, config.num_layers));
}

template <typename Element>
Trainer<Element> create_trainer(const GPTConfig& config, int B, int T, const PipelineLayout& layout,
                                const CommGroups& groups, const MixedPrecision& precision) {
  if (T > config.max_seq_len) {
    throw std::runtime_error("--seq-len " + std::to_string(T) + " is above the model's maxT " +
                             std::to_string(config.max_seq_len));
  }
  const Mesh& mesh = groups.mesh;
  Trainer<Element> trainer;
  trainer.config = config;
  trainer.B = B;
  trainer.T = T;
  trainer.microbatches = layout.microbatches;
  trainer.world = World{mesh.world_size, mesh.world_rank};
  trainer.groups = groups;
  // The plan's schedule and layer split are the ones this trainer runs (one construction of each).
  const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
  const MemoryPlanInput planned = memory_plan_input(config, B, T, layout, mesh, bf16, precision);
  const PipelineSchedule& schedule = planned.schedule;
  trainer.virtual_stages = planned.virtual_stages;
  trainer.placement = schedule.placement;
  trainer.chunks = chunks_of_stage(trainer.virtual_stages, trainer.placement, mesh.pp_rank);
  const StageMemoryPlan plan = plan_memory(planned)[mesh.pp_rank];
  const uint64_t bytes_before = device_memory_counts().bytes_in_use;
  CUDA_CHECK(cudaStreamCreate(&trainer.stream));
  CUBLAS_CHECK(cublasCreate(&trainer.cublas));
  trainer.cublas_workspace = device_alloc_bytes(planned.cublas_workspace_bytes);
  bind_cublas(trainer.cublas, trainer.stream, trainer.cublas_workspace, planned.cublas_workspace_bytes);
  trainer.parameter_layout = parameter_layout(config, trainer.chunks, {mesh.tp, mesh.tp_rank});
  const size_t n = trainer.parameter_layout.size;
  trainer.parameter_memory = device_alloc<Element>(n);
  trainer.gradient_memory = device_alloc<Element>(n);
  trainer.grad_wte_head = has_head(trainer.chunks) ? device_alloc<Element>(wte_size(config, mesh.tp)) : nullptr;
  trainer.params = stage_views(trainer.parameter_memory, trainer.parameter_layout);
  trainer.grads = stage_views(trainer.gradient_memory, trainer.parameter_layout);
  trainer.executor =
      create_executor<Element>(config, B, T, schedule.stages[mesh.pp_rank], trainer.chunks, trainer.placement,
                               mesh.pp_rank, layout.recompute, trainer.groups, trainer.cublas, trainer.stream,
                               layout.attention, layout.sequence_parallel);
  const OptimizerShards shards = optimizer_shards(trainer.parameter_layout, planned.zero ? mesh.dp : 1);
  trainer.buckets = create_gradient_buckets(gradient_buckets(trainer.parameter_layout), wte_bucket(trainer.parameter_layout),
                                            trainer.groups, planned.zero ? shards.bounds : std::vector<size_t>{},
                                            has_embedding(trainer.chunks));
  trainer.pending = std::make_shared<ParametersPending>(
      parameters_pending(trainer.parameter_layout, trainer.buckets, config.num_layers));
  for (ParameterTensors<Element>& views : trainer.params) views.pending = trainer.pending.get();
  const bool master_weights = bf16 && precision.master_weights;
  const OptimizerShard shard = planned.zero ? OptimizerShard{shards.bounds[mesh.dp_rank],
                                                             shards.bounds[mesh.dp_rank + 1], shards.largest, true}
                                            : whole_stage(trainer.parameter_layout);
  trainer.optimizer = create_optimizer(config, trainer.parameter_layout, master_weights, precision.rounding_seed, shard);
  CUDA_CHECK(cudaMallocHost(&trainer.figures, sizeof(StepFigures)));
  const size_t microbatch_bytes = size_t(B) * T * sizeof(int);
  const int held = layout.microbatches + (layout.pipedream ? mesh.pp - 1 : 0);
  CUDA_CHECK(cudaMallocHost(&trainer.host_tokens, held * microbatch_bytes));
  CUDA_CHECK(cudaMallocHost(&trainer.host_targets, held * microbatch_bytes));
  const size_t step_tokens = held * size_t(B) * T;
  std::fill_n(trainer.host_tokens, step_tokens, 0);  // token 0 until a step reads its own
  std::fill_n(trainer.host_targets, step_tokens, 0);
  trainer.host_logits.resize(config.padded_vocab_size);
  if (layout.pipedream) enable_pipedream_updates(trainer, *layout.pipedream);  // the stashes and the ring
  const uint64_t allocated = device_memory_counts().bytes_in_use - bytes_before;
  if (allocated != plan.resident_bytes)
    throw std::runtime_error("create_trainer: stage " + std::to_string(mesh.pp_rank) + " allocated " +
                             std::to_string(allocated) + " bytes, its memory plan " +
                             std::to_string(plan.resident_bytes) + " (pipeline/memory_plan.cpp is out of date)");
  connect_communicators(trainer.groups, trainer.stream);
  return trainer;
}

template <typename Element>
Trainer<Element> create_trainer(const GPTConfig& config, int B, int T, int microbatches,
                                const MixedPrecision& precision) {
  const CommGroups alone = create_world_groups(make_mesh(1, 1, 1, 0));
  return create_trainer<Element>(config, B, T, {ScheduleKind::one_f_one_b, microbatches, 1, false, {}}, alone,
                                 precision);
}

template <typename Element>
void destroy_trainer(Trainer<Element>& trainer) {
  destroy_gradient_buckets(trainer.buckets);  // first: its broadcasts may be writing the parameters
  device_free(trainer.parameter_memory);
  device_free(trainer.gradient_memory);
  device_free(trainer.grad_wte_head);
  destroy_executor(trainer.executor);
  trainer.pipedream.reset();
  destroy_optimizer(trainer.optimizer);
  CUDA_CHECK(cudaFreeHost(trainer.figures));
  CUDA_CHECK(cudaFreeHost(trainer.host_tokens));
  CUDA_CHECK(cudaFreeHost(trainer.host_targets));
  CUBLAS_CHECK(cublasDestroy(trainer.cublas));
  device_free(trainer.cublas_workspace);
  CUDA_CHECK(cudaStreamDestroy(trainer.stream));
}

template <typename Element>
void upload_parameters(Trainer<Element>& trainer, const std::vector<float>& parameters) {
  upload_full_layout(trainer, trainer.parameter_memory, parameters);
  if (trainer.optimizer.master != nullptr)
    upload_full_layout(trainer, trainer.optimizer.master, download_full_layout(trainer, trainer.parameter_memory),
                       &trainer.optimizer.shard);
}

template <typename Element>
void upload_moments(Trainer<Element>& trainer, const std::vector<float>& m, const std::vector<float>& v) {
  upload_full_layout(trainer, trainer.optimizer.m, m, &trainer.optimizer.shard);
  upload_full_layout(trainer, trainer.optimizer.v, v, &trainer.optimizer.shard);
}

template <typename Element>
void upload_master_weights(Trainer<Element>& trainer, const std::vector<float>& master) {
  if (trainer.optimizer.master == nullptr) throw std::runtime_error("upload_master_weights: the trainer has none");
  upload_full_layout(trainer, trainer.optimizer.master, master, &trainer.optimizer.shard);
}

template <typename Element>
std::vector<float> download_parameters(const Trainer<Element>& trainer) {
  return download_full_layout(trainer, trainer.parameter_memory);
}

template <typename Element>
void download_moments(const Trainer<Element>& trainer, std::vector<float>& m, std::vector<float>& v) {
  m = download_full_layout(trainer, trainer.optimizer.m, &trainer.optimizer.shard);
  v = download_full_layout(trainer, trainer.optimizer.v, &trainer.optimizer.shard);
}

template <typename Element>
std::vector<float> download_master_weights(const Trainer<Element>& trainer) {
  if (trainer.optimizer.master == nullptr) return {};
  return download_full_layout(trainer, trainer.optimizer.master, &trainer.optimizer.shard);
}

template <typename Element>
std::vector<ParameterRegion> stage_regions(const Trainer<Element>& trainer, int stage) {
  return parameter_layout(trainer.config, chunks_of_stage(trainer.virtual_stages, trainer.placement, stage)).regions;
}

template <typename Element>
std::vector<float> download_gradients(const Trainer<Element>& trainer) {
  return download_full_layout(trainer, trainer.gradient_memory);
}

template <typename Element>
StepResult run_step(Trainer<Element>& trainer, const AdamWSettings& settings, double learning_rate, int t,
                    double loss_denominator) {
  const GPTConfig& config = trainer.config;
  const Mesh& mesh = trainer.groups.mesh;
  CUDA_CHECK(
      cudaMemsetAsync(trainer.gradient_memory, 0, trainer.parameter_layout.size * sizeof(Element), trainer.stream));
  const bool head = has_head(trainer.chunks);
  if (head)
    CUDA_CHECK(cudaMemsetAsync(trainer.grad_wte_head, 0, wte_size(config, mesh.tp) * sizeof(Element), trainer.stream));
  fail_if_injected(trainer.world.rank, t);
  // Before the backward: the data-parallel sum of a layer may start as soon as its gradients are final.
  inject_nan_if_asked(trainer.world.rank, t, trainer.parameter_layout, trainer.gradient_memory, trainer.stream);
  GradientBuckets& buckets = trainer.buckets;
  buckets.queued.clear();
  if (buckets.stream != nullptr)
    trainer.executor.gradients_final = [&trainer, t](int chunk, int layer) {
      queue_final_buckets(trainer.buckets, trainer.groups, trainer.gradient_memory, chunk, layer, trainer.stream);
      if (!trainer.buckets.queued.empty()) fail_if_injected(trainer.world.rank, t, FailurePoint::data_parallel_sum);
    };
  execute_step(trainer.executor, trainer.params, trainer.grads, trainer.grad_wte_head, trainer.host_tokens,
               trainer.host_targets, trainer.shape);
  trainer.executor.gradients_final = nullptr;
  fail_if_injected(trainer.world.rank, t, FailurePoint::schedule_queued);
  // The tied embedding: the head's share joins wte's gradient on the stage with the head (zero
  // there unless it also has the embedding), then the first and last stage add their copies. A
  // stage with both (one stage, or stage 0 of the V placement, whose last stage has neither)
  // holds the whole sum already. In bf16, NCCL's sum of the two shares is one rounding of their
  // exact sum, as the single stage's sum_tied_embedding_gradient is (0 + a head share rounds to
  // itself). Then wte's data-parallel sum, the last bucket. With tp > 1 each of it is a tp rank's
  // Vp / tp rows, summed with the same rows at the pipeline's other end (the embedding
  // communicator joins the ranks of one tp_rank).
  Element* grad_wte = wte_of(trainer, trainer.gradient_memory);
  if (head) sum_tied_embedding_gradient(config, grad_wte, trainer.grad_wte_head, trainer.stream, mesh.tp);
  if (head != has_embedding(trainer.chunks))
    allreduce_tied_embedding_gradient(trainer.groups, grad_wte, wte_size(config, mesh.tp), nccl_data_type<Element>(),
                                      trainer.stream);
  finish_data_parallel_sum(buckets, trainer.groups, trainer.gradient_memory, trainer.stream);
  inject_loss_nan_if_asked(trainer.world.rank, t, head, trainer.executor.loss_sum, trainer.stream);
  // The update is decided on the device, alike on every rank (trainer/step/optimizer.h): skipped when
  // any rank's loss sum or the norm is not finite.
  queue_gradient_norm(trainer.optimizer, trainer.groups, trainer.gradient_memory, trainer.stream);
  queue_step_gate(trainer.optimizer, trainer.groups, trainer.executor.loss_sum, settings.grad_clip, trainer.stream);
  queue_adamw_update(trainer.optimizer, trainer.parameter_memory, trainer.gradient_memory, settings, learning_rate, t,
                     trainer.stream);
  gather_updated_parameters(buckets, trainer.groups, trainer.parameter_memory, trainer.stream);
  StepFigures& figures = *trainer.figures;
  CUDA_CHECK(cudaMemcpyAsync(&figures.loss_sum, trainer.executor.loss_sum, sizeof(double), cudaMemcpyDeviceToHost,
                             trainer.stream));
  CUDA_CHECK(cudaMemcpyAsync(&figures.norm, trainer.optimizer.norm, sizeof(double), cudaMemcpyDeviceToHost,
                             trainer.stream));
  CUDA_CHECK(cudaMemcpyAsync(&figures.gate, trainer.optimizer.gate, sizeof(AdamWGate), cudaMemcpyDeviceToHost,
                             trainer.stream));
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));  // the step's one host wait
  finish_step(trainer.executor);
  // Only the head stages hold losses, the same on each tp rank: tp rank 0's count, the others add
  // theirs times 0 (0, or NaN: a NaN that skips the step shows). Also counts the stop signals.
  const int stop_signal = received_stop_signal();
  const double loss_share = mesh.tp_rank == 0 ? figures.loss_sum : figures.loss_sum * 0.0;
  double sums[3] = {loss_share, stop_signal == SIGTERM ? 1.0 : 0.0, stop_signal == SIGINT ? 1.0 : 0.0};
  sum_over_world(trainer.world, sums, 3);
  StepResult result;
  result.loss = sums[0] / loss_denominator;
  result.grad_norm = figures.norm;
  result.stop_signal = sums[2] > 0 ? SIGINT : sums[1] > 0 ? SIGTERM : 0;
  if (!figures.gate.apply) {
    result.applied = false;
    const std::vector<float> partials = download_norm_partials(trainer.optimizer, trainer.stream);
    result.skipped = skipped_step_reason(
        figures.norm, first_nonfinite_gradient(partials, config, trainer.virtual_stages, trainer.placement));
  }
  result.stages = gather_stage_records(trainer.world, mesh, measure_stage(mesh.pp_rank, trainer.executor.accounting));
  return result;
}

template <typename Element>
double validation_loss(Trainer<Element>& trainer, BatchReader& reader, int batches) {
  const uint64_t resume_position = reader.next_microbatch;
  reader.next_microbatch = 0;
  double loss_sum = 0;
  for (int batch = 0; batch < batches; ++batch) {
    read_microbatch(reader, trainer.host_tokens, trainer.host_targets);
    const ForwardResult<Element> forward = execute_forward(trainer.executor, trainer.params, trainer.host_tokens,
                                                           trainer.host_targets, trainer.B, trainer.T);
    loss_sum += forward.loss;
  }
  reader.next_microbatch = resume_position;
  // Every replica and tp rank computed the same losses: replica 0's tp rank 0's count.
  if (trainer.groups.mesh.dp_rank != 0 || trainer.groups.mesh.tp_rank != 0) loss_sum = 0;
  sum_over_world(trainer.world, &loss_sum, 1);
  return loss_sum / batches;
}

template <typename Element>
const std::vector<float>& next_token_logits(Trainer<Element>& trainer, const int* context, int count) {
  const Mesh& mesh = trainer.groups.mesh;
  const size_t Vp = trainer.config.padded_vocab_size, columns = Vp / mesh.tp;  // a tp rank's vocabulary slice
  std::copy(context, context + count, trainer.host_tokens);  // pinned, as a step's
  // Sequence parallel: padded to a multiple of tp with token 0 (causal: row count - 1 is unchanged).
  const int shards = trainer.executor.sequence_shards(), length = (count + shards - 1) / shards * shards;
  std::fill(trainer.host_tokens + count, trainer.host_tokens + length, 0);
  const ForwardResult<Element> forward =
      execute_forward(trainer.executor, trainer.params, trainer.host_tokens, nullptr, 1, length);
  trainer.host_logits.assign(Vp, 0.0f);
  if (forward.logits != nullptr && mesh.dp_rank == 0) {
    std::vector<Element> row(columns);
    CUDA_CHECK(cudaMemcpy(row.data(), forward.logits + size_t(count - 1) * columns, columns * sizeof(Element),
                          cudaMemcpyDeviceToHost));
    std::copy(row.begin(), row.end(), trainer.host_logits.begin() + mesh.tp_rank * columns);
  }
  // Each of the head stage's tp ranks holds its columns of the row, every other rank zeros: the
  // sum is the row (x + 0 = x).
  sum_over_world(trainer.world, trainer.host_logits.data(), Vp);
  trainer.host_logits.resize(trainer.config.vocab_size);
  return trainer.host_logits;
}

#define INSTANTIATE_TRAINER(Element)                                                                               \
  template Trainer<Element> create_trainer<Element>(const GPTConfig&, int, int, const PipelineLayout&,             \
                                                    const CommGroups&, const MixedPrecision&);                     \
  template Trainer<Element> create_trainer<Element>(const GPTConfig&, int, int, int, const MixedPrecision&);       \
  template void destroy_trainer<Element>(Trainer<Element>&);                                                       \
  template void upload_parameters<Element>(Trainer<Element>&, const std::vector<float>&);                          \
  template void upload_moments<Element>(Trainer<Element>&, const std::vector<float>&, const std::vector<float>&);  \
  template void upload_master_weights<Element>(Trainer<Element>&, const std::vector<float>&);                      \
  template std::vector<float> download_parameters<Element>(const Trainer<Element>&);                               \
  template void download_moments<Element>(const Trainer<Element>&, std::vector<float>&, std::vector<float>&);      \
  template std::vector<float> download_master_weights<Element>(const Trainer<Element>&);                           \
  template std::vector<ParameterRegion> stage_regions<Element>(const Trainer<Element>&, int);                      \
  template std::vector<float> download_gradients<Element>(const Trainer<Element>&);                                \
  template StepResult run_step<Element>(Trainer<Element>&, const AdamWSettings&, double, int, double);             \
  template double validation_loss<Element>(Trainer<Element>&, BatchReader&, int);                                  \
  template const std::vector<float>& next_token_logits<Element>(Trainer<Element>&, const int*, int);

INSTANTIATE_TRAINER(float)
INSTANTIATE_TRAINER(__nv_bfloat16)
