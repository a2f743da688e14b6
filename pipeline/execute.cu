// The executor of one pipeline stage (pipeline/execute.h): its creation, the timed walk over the
// schedule (the steps themselves are in execute_steps.cu), the accounting, the forward-only pass,
// and the trace's text.
#include "pipeline/execute.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "comm/nccl_types.h"
#include "comm/p2p.h"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/gemm.cuh"
#include "pipeline/execute_steps.h"
#include "pipeline/pipedream_walk.h"

namespace {

template <typename Element>
void check_views(const Executor<Element>& e, const std::vector<ParameterTensors<Element>>& views,
                 const char* function) {
  if (views.size() != e.chunks.size())
    throw std::runtime_error(std::string(function) + ": " + std::to_string(views.size()) + " chunks' views for " +
                             std::to_string(e.chunks.size()) + " chunks");
}

template <typename Element>
void update_accounting(Executor<Element>& e) {
  ExecutorAccounting& a = e.accounting;
  a.slots.clear();
  a.slot_bytes.clear();
  a.weight_buffers.clear();
  a.weight_buffer_bytes.clear();
  a.activation_bytes = a.working_set_bytes;
  for (const ChunkState<Element>& state : e.chunks) {
    const size_t bytes =
        state.inputs.bytes +
        (e.recompute ? 0
                     : activation_bytes<Element>(e.config, e.B, e.T, state.range, e.tp, e.attention,
                                                 e.sequence_parallel));
    a.slots.push_back(int(state.inputs.buffers.size()));
    a.slot_bytes.push_back(bytes);
    a.weight_buffers.push_back(int(state.weight_pool.buffers.size()));
    a.weight_buffer_bytes.push_back(state.weight_pool.bytes);
    a.activation_bytes += bytes * state.inputs.buffers.size() + pool_bytes(state.weight_pool);
  }
  a.transfer_bytes = pool_bytes(e.sends) + pool_bytes(e.grad_outputs) + pool_bytes(e.grad_inputs);
  a.step_ms.assign(e.schedule.size(), 0.0f);
  a.step_start_ms.assign(e.origin_marked ? e.schedule.size() : 0, 0.0f);
  a.step_end_ms.assign(a.step_start_ms.size(), 0.0f);
  a.busy_ms = 0;
  a.pairs_overlapped = 0;
  // The steps run on several streams: the span runs from the earliest start to the latest end, both
  // measured from the first step's start.
  float first_start = 0, last_end = 0, start = 0, end = 0;
  for (size_t i = 0; i < e.schedule.size(); ++i) {
    const float previous_start = start, previous_end = end;
    CUDA_CHECK(cudaEventElapsedTime(&start, e.step_start.front(), e.step_start[i]));
    CUDA_CHECK(cudaEventElapsedTime(&end, e.step_start.front(), e.step_end[i]));
    first_start = std::min(first_start, start);
    last_end = std::max(last_end, end);
    if (e.schedule[i][0].overlapped && start < previous_end && previous_start < end) a.pairs_overlapped += 1;
    CUDA_CHECK(cudaEventElapsedTime(&a.step_ms[i], e.step_start[i], e.step_end[i]));
    if (e.origin_marked) {
      CUDA_CHECK(cudaEventElapsedTime(&a.step_start_ms[i], e.origin, e.step_start[i]));
      CUDA_CHECK(cudaEventElapsedTime(&a.step_end_ms[i], e.origin, e.step_end[i]));
    }
    if (is_compute(e.schedule[i])) a.busy_ms += a.step_ms[i];
  }
  e.origin_marked = false;
  a.span_ms = last_end - first_start;
}

// Work queued on `later` from now on runs after all work queued on `earlier` so far.
void order_after(cudaStream_t later, cudaStream_t earlier, cudaEvent_t event) {
  if (later == earlier) return;
  CUDA_CHECK(cudaEventRecord(event, earlier));
  CUDA_CHECK(cudaStreamWaitEvent(later, event, 0));
}

// A new walk: the pools that transfers use forget the steps that last used their buffers. Named
// one by one, not listed in the Executor: a list of pointers to its members would dangle once the
// Executor create_executor returns is moved into its owner.
template <typename Element>
void forget_transfer_steps(Executor<Element>& e) {
  forget_steps(e.sends);
  forget_steps(e.grad_outputs);
  forget_steps(e.grad_inputs);
  for (ChunkState<Element>& state : e.chunks) forget_steps(state.inputs);
}

// Before a compute whose buffers are `uses`: its compute stream waits for the last transfer
// group that used one of them.
template <typename Element>
void wait_for_transfers(Executor<Element>& e, const BufferUses& uses, cudaStream_t compute) {
  int after = -1;
  for (int k = 0; k < uses.count; ++k) {
    const BufferUse& use = uses.uses[k];
    if (size_t(use.index) < use.pool->transfer_step.size()) after = std::max(after, use.pool->transfer_step[use.index]);
  }
  if (after >= 0 && e.transfer_stream != e.stream) CUDA_CHECK(cudaStreamWaitEvent(compute, e.step_end[after], 0));
}

// Whether schedule step i is an overlapped pair's backward that runs on the second compute stream:
// not the chunk's last B, whose layer reports (gradients_final) mark its gradients final on the
// caller's stream, so that one runs there, after its forward.
template <typename Element>
bool on_second_stream(const Executor<Element>& e, size_t i) {
  return e.pair_backwards.stream != nullptr && i < e.schedule.size() && is_compute(e.schedule[i]) &&
         e.schedule[i][0].overlapped && e.last_gradient_step[e.schedule[i][0].chunk] != int(i);
}

}  // namespace

template <typename Element>
Executor<Element> plan_executor(const GPTConfig& config, int B, int T, const StageSchedule& schedule,
                                const std::vector<LayerRange>& chunk_ranges, const Placement& placement, int stage,
                                bool recompute, AttentionKind attention, int tp, bool sequence_parallel) {
  if (int(chunk_ranges.size()) != placement.v)
    throw std::runtime_error("create_executor: " + std::to_string(chunk_ranges.size()) + " chunks for a placement of " +
                             std::to_string(placement.v));
  Executor<Element> e{};
  e.config = config;
  e.B = B;
  e.T = T;
  e.p = placement.p;
  e.v = placement.v;
  e.placement = placement;
  e.stage = stage;
  e.recompute = recompute;
  e.attention = attention;
  e.tp = tp;
  e.sequence_parallel = sequence_parallel;
  e.schedule = schedule;
  const size_t btc_bytes = size_t(B) * T / e.sequence_shards() * config.channels * sizeof(Element);
  const std::string of_stage = "stage " + std::to_string(stage) + "'s ";
  e.sends = make_pool(btc_bytes, of_stage + "send buffers");
  e.grad_outputs = make_pool(btc_bytes, of_stage + "output gradients");
  e.grad_inputs = make_pool(btc_bytes, of_stage + "input gradients");
  for (const LayerRange& range : chunk_ranges) {
    const std::string of_chunk = of_stage + "chunk " + std::to_string(e.chunks.size()) + "'s ";
    ChunkState<Element> state{range,
                              make_pool(stage_input_bytes<Element>(config, B, T, range, e.sequence_shards()),
                                        of_chunk + "slots"),
                              {},
                              {},
                              -1,
                              {},
                              make_pool(weight_gradient_input_bytes<Element>(config, B, T, range, tp, sequence_parallel),
                                        of_chunk + "weight-gradient inputs"),
                              {}};
    e.chunks.push_back(std::move(state));
  }
  plan_pools(e);
  return e;
}

template <typename Element>
Executor<Element> create_executor(const GPTConfig& config, int B, int T, const StageSchedule& schedule,
                                  const std::vector<LayerRange>& chunk_ranges, const Placement& placement,
                                  int stage, bool recompute, const CommGroups& groups, cublasHandle_t cublas,
                                  cudaStream_t stream, AttentionKind attention, bool sequence_parallel) {
  // Every buffer a step takes, allocated now: an allocation inside a step would synchronise the
  // device while its NCCL operations wait on peers. The counts are the plan's (the memory plan,
  // pipeline/memory_plan.h, runs the same plan_executor).
  Executor<Element> e =
      plan_executor<Element>(config, B, T, schedule, chunk_ranges, placement, stage, recompute, attention,
                             groups.mesh.tp, sequence_parallel);
  e.groups = groups;
  if (e.tp > 1) {
    e.tensor_parallel_groups = std::make_shared<const CommGroups>(groups);
    e.tensor_parallel = {e.tensor_parallel_groups.get(), create_tensor_parallel_overlap()};
    e.tensor_parallel.sequence_parallel = sequence_parallel;
  }
  e.cublas = cublas;
  e.stream = stream;
  const char* serial = std::getenv("TRAIN_TRANSFERS_IN_COMPUTE_STREAM");
  if (serial != nullptr && std::string(serial) == "1") e.transfer_stream = stream;
  else CUDA_CHECK(cudaStreamCreate(&e.transfer_stream));
  for (ChunkState<Element>& state : e.chunks) {
    state.scratch = create_backward_scratch<Element>(config, B, T, state.range, e.tp, attention, sequence_parallel);
    if (recompute) {
      state.working = create_activations<Element>(config, B, T, state.range, e.tp, attention, sequence_parallel);
      e.accounting.working_set_bytes += state.working.bytes;
    }
    allocate_pool(state.inputs);
    if (!recompute)
      for (size_t i = 0; i < state.inputs.buffers.size(); ++i)
        state.acts.push_back(
            create_activations<Element>(config, B, T, state.range, e.tp, attention, sequence_parallel));
    allocate_pool(state.weight_pool);
    for (void* buffer : state.weight_pool.buffers)
      state.weight_inputs.push_back(
          weight_gradient_inputs_at<Element>(buffer, config, B, T, state.range, e.tp, sequence_parallel));
  }
  allocate_pool(e.sends);
  allocate_pool(e.grad_outputs);
  allocate_pool(e.grad_inputs);
  e.targets = device_alloc<int>(size_t(B) * T);
  e.loss_sum = device_alloc<double>(1);
  e.progress = std::make_shared<ExecutorProgress>();
  e.last_gradient_step.assign(e.v, -1);
  bool pairs = false;
  for (size_t i = 0; i < schedule.size(); ++i)
    for (const Action& a : schedule[i]) {
      if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight)
        e.last_gradient_step[a.chunk] = int(i);
      pairs = pairs || a.overlapped;
    }
  if (pairs) {
    CUDA_CHECK(cudaStreamCreate(&e.pair_backwards.stream));
    CUBLAS_CHECK(cublasCreate(&e.pair_backwards.cublas));
    e.pair_workspace = device_alloc_bytes(cublas_workspace_bytes());
    bind_cublas(e.pair_backwards.cublas, e.pair_backwards.stream, e.pair_workspace, cublas_workspace_bytes());
    CUDA_CHECK(cudaEventCreateWithFlags(&e.pair_start, cudaEventDisableTiming));
  }
  e.trace.resize(schedule.size());
  e.step_start.resize(schedule.size());
  e.step_end.resize(schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    CUDA_CHECK(cudaEventCreate(&e.step_start[i]));
    CUDA_CHECK(cudaEventCreate(&e.step_end[i]));
  }
  CUDA_CHECK(cudaEventCreate(&e.origin));
  CUDA_CHECK(cudaEventCreateWithFlags(&e.compute_ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&e.transfers_done, cudaEventDisableTiming));
  return e;
}

template <typename Element>
void destroy_executor(Executor<Element>& e) {
  destroy_pipedream(e);
  for (ChunkState<Element>& state : e.chunks) {
    destroy_pool(state.inputs);
    for (Activations<Element>& acts : state.acts) destroy_activations(acts);
    if (e.recompute) destroy_activations(state.working);
    destroy_backward_scratch(state.scratch);
    destroy_pool(state.weight_pool);
  }
  destroy_pool(e.sends);
  destroy_pool(e.grad_outputs);
  destroy_pool(e.grad_inputs);
  device_free(e.targets);
  device_free(e.loss_sum);
  for (cudaEvent_t event : e.step_start) CUDA_CHECK(cudaEventDestroy(event));
  for (cudaEvent_t event : e.step_end) CUDA_CHECK(cudaEventDestroy(event));
  CUDA_CHECK(cudaEventDestroy(e.origin));
  CUDA_CHECK(cudaEventDestroy(e.compute_ready));
  CUDA_CHECK(cudaEventDestroy(e.transfers_done));
  if (e.transfer_stream != e.stream) CUDA_CHECK(cudaStreamDestroy(e.transfer_stream));
  if (e.tp > 1) destroy_tensor_parallel_overlap(e.tensor_parallel.overlap);
  if (e.pair_backwards.stream != nullptr) {
    CUBLAS_CHECK(cublasDestroy(e.pair_backwards.cublas));
    device_free(e.pair_workspace);
    CUDA_CHECK(cudaEventDestroy(e.pair_start));
    CUDA_CHECK(cudaStreamDestroy(e.pair_backwards.stream));
  }
  e = Executor<Element>{};
}

template <typename Element>
void execute_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params,
                  const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head,
                  const int* host_tokens, const int* host_targets, const StepShape& shape) {
  check_views(e, params, "execute_step");
  check_views(e, grads, "execute_step");
  if (e.pipedream) begin_pipedream_step(e);
  check_lengths(e, shape.lengths);
  e.shape = shape;
  CUDA_CHECK(cudaMemsetAsync(e.loss_sum, 0, sizeof(double), e.stream));  // all bits zero: 0.0
  for (ChunkState<Element>& state : e.chunks) state.working_microbatch = -1;
  ExecutorProgress& progress = *e.progress;
  {
    std::lock_guard<std::mutex> lock(progress.mutex);
    progress.walks += 1;
    progress.walking = true;
    progress.queued = 0;
  }
  forget_transfer_steps(e);
  order_after(e.transfer_stream, e.stream, e.compute_ready);
  if (e.pair_backwards.stream != nullptr) {  // the caller may have changed its handle's mode (TF32 or not)
    cublasMath_t mode;
    CUBLAS_CHECK(cublasGetMathMode(e.cublas, &mode));
    CUBLAS_CHECK(cublasSetMathMode(e.pair_backwards.cublas, mode));
  }
  for (size_t i = 0; i < e.schedule.size(); ++i) {
    const Step& step = e.schedule[i];
    const std::string name = to_text(step);
    nvtxRangePushA(name.c_str());
    const bool compute = is_compute(step);
    const ComputeStream on = on_second_stream(e, i) ? e.pair_backwards : ComputeStream{e.stream, e.cublas};
    if (!compute) {
      transfer_step(e, i, step, e.trace[i]);
      if (e.pipedream) after_pipedream_transfer(e, step);  // records its start on the transfer stream
    } else {
      // PipeDream's weight version of the microbatch and its share of wte's gradient; else params, grad_wte_head.
      const std::vector<ParameterTensors<Element>> used = e.pipedream ? pipedream_views(e, step[0], params) : params;
      Element* const head_share = pipedream_head_share(e, step[0], grad_wte_head);
      // An overlapped pair: its backward starts on the second stream from where the caller's stood
      // before the forward (every compute it depends on is before the pair), beside the forward;
      // the two touch different chunks' slots, working sets and scratch, and the forward no gradient.
      if (on_second_stream(e, i + 1)) record_step_event(e, e.pair_start, e.stream);
      if (on.stream != e.stream) CUDA_CHECK(cudaStreamWaitEvent(on.stream, e.pair_start, 0));
      // The compute's start is recorded after its waits: its time is its own, not the transfers'.
      const BufferUses uses = compute_uses(e, step[0]);
      wait_for_transfers(e, uses, on.stream);
      record_step_event(e, e.step_start[i], on.stream);
      if (e.before_compute) e.before_compute(int(i), on.stream);
      if (step[0].kind == ActionKind::forward) {
        forward_step(e, used, step[0].microbatch, step[0].chunk, host_tokens, host_targets, e.trace[i]);
      } else if (step[0].kind == ActionKind::backward_weight) {
        weight_step(e, grads, head_share, step[0], e.trace[i]);
      } else {
        backward_step(e, on, used, e.pipedream ? pipedream_gradient_views(e, step[0], grads) : grads, head_share,
                      step[0], host_targets, e.trace[i]);
      }
      for (int k = 0; k < uses.count; ++k) uses.uses[k].pool->compute_step[uses.uses[k].index] = int(i);
    }
    {
      std::lock_guard<std::mutex> lock(progress.mutex);
      CUDA_CHECK(cudaEventRecord(e.step_end[i], compute ? on.stream : e.transfer_stream));
      progress.queued = int(i) + 1;
    }
    // After the pair, the caller's stream waits for its backward: what follows may read what it wrote.
    if (on.stream != e.stream) CUDA_CHECK(cudaStreamWaitEvent(e.stream, e.step_end[i], 0));
    if (compute && e.pipedream) after_pipedream_compute(e);  // outside the backward's time, as the updates
    nvtxRangePop();
  }
  if (e.pipedream) end_pipedream_step(e);
  order_after(e.stream, e.transfer_stream, e.transfers_done);
}

template <typename Element>
void finish_step(Executor<Element>& e) {
  {
    std::lock_guard<std::mutex> lock(e.progress->mutex);
    e.progress->walking = false;
  }
  update_accounting(e);
}

template <typename Element>
ForwardResult<Element> execute_forward(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params,
                                       const int* host_tokens, const int* host_targets, int B, int T) {
  check_views(e, params, "execute_forward");
  if (B > e.B || T > e.T) throw std::runtime_error("execute_forward: the microbatch is larger than the executor's");
  ForwardResult<Element> result{0.0, nullptr};
  const size_t BT = size_t(B) * T, count = BT / e.sequence_shards() * e.config.channels;
  // A key no training microbatch uses; chunk c's is key - c. The pass holds at most one slot of
  // each chunk at once, which every chunk's pool has (each of the schedule's forwards takes one):
  // it allocates nothing.
  const int key = -1;
  {
    std::lock_guard<std::mutex> lock(e.progress->mutex);
    e.progress->walks += 1;
  }
  nvtxRangePushA("forward only");
  // One transfer with the stage holding virtual stage `virtual_stage`, on the transfer stream
  // between the computes before and after it (a forward-only pass has nothing to overlap).
  const auto transfer = [&](bool send, void* buffer, int virtual_stage) {
    Transfer t{send, stage_of(e, virtual_stage) == (e.stage + 1) % e.p, buffer, count};
    order_after(e.transfer_stream, e.stream, e.compute_ready);
    exchange_group(e.groups, &t, 1, nccl_data_type<Element>(), e.transfer_stream);
    order_after(e.stream, e.transfer_stream, e.transfers_done);
  };
  for (int chunk = 0; chunk < e.v; ++chunk) {
    ChunkState<Element>& state = e.chunks[chunk];
    const int vs = e.placement.virtual_stage(e.stage, chunk);
    int slot;
    if (state.range.has_embedding) {
      slot = take_slot(e, chunk, key - chunk);
      CUDA_CHECK(cudaMemcpyAsync(state.inputs.buffers[slot], host_tokens, BT * sizeof(int), cudaMemcpyHostToDevice,
                                 e.stream));
    } else if (local_previous_chunk(e, chunk) >= 0) {
      slot = held(state.inputs, key - chunk);
    } else {
      slot = take_slot(e, chunk, key - chunk);
      transfer(false, state.inputs.buffers[slot], vs - 1);
    }
    forward_chunk(e, {e.stream, e.cublas}, params, chunk, slot, host_targets, 1.0, B, T);
    const Activations<Element>& acts = activations_of(e, chunk, slot);
    const int next = local_next_chunk(e, chunk);
    if (state.range.has_head) {
      if (host_targets != nullptr) result.loss = mean_loss(acts, B, T, e.stream);
      result.logits = acts.logits;
    } else if (next >= 0) {
      const int next_slot = take_slot(e, next, key - next);
      CUDA_CHECK(cudaMemcpyAsync(e.chunks[next].inputs.buffers[next_slot], range_output(acts), count * sizeof(Element),
                                 cudaMemcpyDeviceToDevice, e.stream));
    } else {
      transfer(true, const_cast<Element*>(range_output(acts)), vs + 1);
    }
    give_back(state.inputs, key - chunk);
  }
  if (e.recompute)
    for (ChunkState<Element>& state : e.chunks) state.working_microbatch = -1;
  CUDA_CHECK(cudaStreamSynchronize(e.stream));
  nvtxRangePop();
  return result;
}

template <typename Element>
void mark_timeline_origin(Executor<Element>& e) {
  CUDA_CHECK(cudaEventRecord(e.origin, e.stream));
  e.origin_marked = true;
}

template <typename Element>
SchedulePosition schedule_position(const Executor<Element>& e) {
  ExecutorProgress& progress = *e.progress;
  std::lock_guard<std::mutex> lock(progress.mutex);
  if (!progress.walking) return {progress.walks, -1};
  for (int i = 0; i < progress.queued; ++i)
    if (cudaEventQuery(e.step_end[i]) == cudaErrorNotReady) return {progress.walks, i};
  // Every queued step has run: the device waits for the host, which is queuing the next (or,
  // after the last, is about to leave).
  return {progress.walks, std::min<int>(progress.queued, int(e.schedule.size()) - 1)};
}

#define INSTANTIATE_EXECUTOR(Element)                                                                               \
  template SchedulePosition schedule_position<Element>(const Executor<Element>&);                                   \
  template Executor<Element> plan_executor<Element>(const GPTConfig&, int, int, const StageSchedule&,               \
                                                    const std::vector<LayerRange>&, const Placement&, int, bool,    \
                                                    AttentionKind, int, bool);                                      \
  template Executor<Element> create_executor<Element>(const GPTConfig&, int, int, const StageSchedule&,             \
                                                      const std::vector<LayerRange>&, const Placement&, int, bool,  \
                                                      const CommGroups&, cublasHandle_t, cudaStream_t,              \
                                                      AttentionKind, bool);                                         \
  template void destroy_executor<Element>(Executor<Element>&);                                                      \
  template void execute_step<Element>(Executor<Element>&, const std::vector<ParameterTensors<Element>>&,            \
                                      const std::vector<ParameterTensors<Element>>&, Element*, const int*,          \
                                      const int*, const StepShape&);                                                \
  template void finish_step<Element>(Executor<Element>&);                                                           \
  template void mark_timeline_origin<Element>(Executor<Element>&);                                                  \
  template ForwardResult<Element> execute_forward<Element>(Executor<Element>&,                                      \
                                                           const std::vector<ParameterTensors<Element>>&,           \
                                                           const int*, const int*, int, int);

INSTANTIATE_EXECUTOR(float)
INSTANTIATE_EXECUTOR(__nv_bfloat16)
