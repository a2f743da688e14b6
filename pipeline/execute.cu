// The executor of one pipeline stage (pipeline/execute.h): buffer pools, the forward and
// backward of a chunk, the grouped transfers, and the timed walk over the schedule.
#include "pipeline/execute.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <stdexcept>

#include "comm/nccl_types.h"
#include "comm/p2p.h"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"

namespace {

BufferPool make_pool(size_t bytes) { return BufferPool{bytes, {}, {}, {}}; }

// Takes a free buffer (allocating one when none is) and holds it under key; returns its index.
int take(BufferPool& pool, int key) {
  if (pool.held.count(key)) throw std::runtime_error("executor: buffer " + std::to_string(key) + " taken twice");
  int index;
  if (pool.free.empty()) {
    pool.buffers.push_back(device_alloc_bytes(pool.bytes));
    index = int(pool.buffers.size()) - 1;
  } else {
    index = pool.free.back();
    pool.free.pop_back();
  }
  pool.held[key] = index;
  return index;
}

int held(const BufferPool& pool, int key) {
  const auto found = pool.held.find(key);
  if (found == pool.held.end()) throw std::runtime_error("executor: buffer " + std::to_string(key) + " is not held");
  return found->second;
}

void give_back(BufferPool& pool, int key) {
  pool.free.push_back(held(pool, key));
  pool.held.erase(key);
}

void destroy_pool(BufferPool& pool) {
  for (void* buffer : pool.buffers) device_free(buffer);
  pool = make_pool(0);
}

template <typename Element>
int key_of(const Executor<Element>& e, int microbatch, int chunk) { return microbatch * e.v + chunk; }
// With p == 1 the next virtual stage is this stage's next chunk: no message, a local hand-over.
template <typename Element>
bool hands_over_locally(const Executor<Element>& e) { return e.p == 1; }

// A slot of the chunk for key: its input buffer, and its activations unless recomputing
// (allocated with the slot, so both pools stay parallel).
template <typename Element>
int take_slot(Executor<Element>& e, int chunk, int key) {
  ChunkState<Element>& state = e.chunks[chunk];
  const int index = take(state.inputs, key);
  if (!e.recompute && size_t(index) == state.acts.size())
    state.acts.push_back(create_activations<Element>(e.config, e.B, e.T, state.range));
  return index;
}

template <typename Element>
Activations<Element>& activations_of(Executor<Element>& e, int chunk, int slot) {
  ChunkState<Element>& state = e.chunks[chunk];
  return e.recompute ? state.working : state.acts[slot];
}

// The chunk's forward of a microbatch from its slot's input; the head gets the targets.
template <typename Element>
void forward_chunk(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params, int chunk, int slot,
                   const int* host_targets, double loss_scale, int B, int T) {
  ChunkState<Element>& state = e.chunks[chunk];
  const void* input = state.inputs.buffers[slot];
  const int* targets = nullptr;
  if (state.range.has_head && host_targets != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(e.targets, host_targets, size_t(B) * T * sizeof(int), cudaMemcpyHostToDevice,
                               e.stream));
    targets = e.targets;
  }
  const bool tokens = state.range.has_embedding;
  gpt_forward(e.config, state.range, params[chunk], activations_of(e, chunk, slot),
              tokens ? static_cast<const int*>(input) : nullptr,
              tokens ? nullptr : static_cast<const Element*>(input), targets, loss_scale, B, T, e.cublas, e.stream);
}

// Microbatch k's (B, T) of host (m, B, T), or nullptr on a stage given none.
const int* microbatch_of(const int* host, int k, size_t BT) { return host == nullptr ? nullptr : host + k * BT; }

void copy_device(void* destination, const void* source, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream));
}

template <typename Element>
size_t btc_elements(const Executor<Element>& e) { return size_t(e.B) * e.T * e.config.channels; }

// The neighbour exchange_group names for a transfer with or without with_next: comm/p2p.h's ring.
template <typename Element>
int peer_of(const Executor<Element>& e, bool with_next) {
  return with_next ? (e.stage + 1) % e.p : (e.stage + e.p - 1) % e.p;
}

void record_compute(ExecutedStep& record, ActionKind kind, int microbatch, int chunk, int slot) {
  record.compute = true;
  record.kind = kind;
  record.microbatch = microbatch;
  record.chunk = chunk;
  record.slot = slot;
  record.output_buffer = -1;
  record.recomputed = false;
  record.messages.clear();  // keeps its capacity: no allocation after the first step
}

// F(microbatch, chunk): the forward, then the output's hand-over: into the next chunk's slot
// (p == 1), or, with recompute (whose working set a later step may overwrite before the send),
// into a send buffer. Without recompute the send reads the slot's activations, alive until B.
template <typename Element>
double forward_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params, int microbatch,
                    int chunk, const int* host_tokens, const int* host_targets, double loss_scale,
                    ExecutedStep& record) {
  ChunkState<Element>& state = e.chunks[chunk];
  const int key = key_of(e, microbatch, chunk);
  const size_t BT = size_t(e.B) * e.T;
  int slot;
  if (state.range.has_embedding) {
    slot = take_slot(e, chunk, key);
    CUDA_CHECK(cudaMemcpyAsync(state.inputs.buffers[slot], microbatch_of(host_tokens, microbatch, BT), BT * sizeof(int),
                               cudaMemcpyHostToDevice, e.stream));
  } else {
    slot = held(state.inputs, key);
  }
  forward_chunk(e, params, chunk, slot, microbatch_of(host_targets, microbatch, BT), loss_scale, e.B, e.T);
  record_compute(record, ActionKind::forward, microbatch, chunk, slot);
  if (e.recompute) state.working_microbatch = microbatch;
  const Activations<Element>& acts = activations_of(e, chunk, slot);
  if (state.range.has_head) return mean_loss(acts, e.B, e.T, e.stream);
  const size_t output_bytes = btc_elements(e) * sizeof(Element);
  if (hands_over_locally(e)) {
    record.output_buffer = take_slot(e, chunk + 1, key_of(e, microbatch, chunk + 1));
    copy_device(e.chunks[chunk + 1].inputs.buffers[record.output_buffer], range_output(acts), output_bytes, e.stream);
  } else if (e.recompute) {
    record.output_buffer = take(e.sends, key);
    copy_device(e.sends.buffers[record.output_buffer], range_output(acts), output_bytes, e.stream);
  }
  return 0;
}

// B(microbatch, chunk): the forward again if the working set holds another microbatch's, the
// backward, then the slot and the output gradient go back. The input gradient goes to a send
// buffer, or with p == 1 straight into the previous chunk's output gradient.
template <typename Element>
void backward_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params,
                   const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head, int microbatch,
                   int chunk, const int* host_targets, double loss_scale, ExecutedStep& record) {
  ChunkState<Element>& state = e.chunks[chunk];
  const int key = key_of(e, microbatch, chunk);
  const int slot = held(state.inputs, key);
  const size_t BT = size_t(e.B) * e.T;
  record_compute(record, ActionKind::backward, microbatch, chunk, slot);
  if (e.recompute && state.working_microbatch != microbatch) {
    forward_chunk(e, params, chunk, slot, microbatch_of(host_targets, microbatch, BT), loss_scale, e.B, e.T);
    state.working_microbatch = microbatch;
    record.recomputed = true;
  }
  const void* input = state.inputs.buffers[slot];
  const bool embedding = state.range.has_embedding;
  const Element* grad_output =
      state.range.has_head ? nullptr : static_cast<const Element*>(e.grad_outputs.buffers[held(e.grad_outputs, key)]);
  Element* grad_input = nullptr;
  if (!embedding) {
    const int index = hands_over_locally(e) ? take(e.grad_outputs, key_of(e, microbatch, chunk - 1))
                                            : take(e.grad_inputs, key);
    grad_input =
        static_cast<Element*>(hands_over_locally(e) ? e.grad_outputs.buffers[index] : e.grad_inputs.buffers[index]);
  }
  gpt_backward(e.config, state.range, params[chunk], grads[chunk], state.range.has_head ? grad_wte_head : nullptr,
               activations_of(e, chunk, slot), state.scratch, embedding ? static_cast<const int*>(input) : nullptr,
               embedding ? nullptr : static_cast<const Element*>(input), grad_output, grad_input, e.B, e.T, e.cublas,
               e.stream);
  give_back(state.inputs, key);
  if (!state.range.has_head) give_back(e.grad_outputs, key);
}

// A step of sends and receives: one NCCL group in the listed order; receives take their
// buffers first, sends give theirs back after (the stream orders any reuse after the send).
template <typename Element>
void transfer_step(Executor<Element>& e, const Step& step, ExecutedStep& record) {
  std::vector<Transfer> transfers;
  const size_t count = btc_elements(e);
  record.compute = false;
  record.messages.clear();
  for (const Action& a : step) {
    const int key = key_of(e, a.microbatch, a.chunk);
    int buffer;
    switch (a.kind) {
      case ActionKind::send_forward: {
        ChunkState<Element>& state = e.chunks[a.chunk];
        buffer = e.recompute ? held(e.sends, key) : held(state.inputs, key);
        const void* output = e.recompute ? e.sends.buffers[buffer] : range_output(state.acts[buffer]);
        transfers.push_back({true, true, const_cast<void*>(output), count});
        break;
      }
      case ActionKind::recv_forward:
        buffer = take_slot(e, a.chunk, key);
        transfers.push_back({false, false, e.chunks[a.chunk].inputs.buffers[buffer], count});
        break;
      case ActionKind::send_backward:
        buffer = held(e.grad_inputs, key);
        transfers.push_back({true, false, e.grad_inputs.buffers[buffer], count});
        break;
      case ActionKind::recv_backward:
        buffer = take(e.grad_outputs, key);
        transfers.push_back({false, true, e.grad_outputs.buffers[buffer], count});
        break;
      default:
        throw std::runtime_error("executor: " + to_text(a) + " in a transfer step");
    }
    record.messages.push_back({a.kind, a.microbatch, a.chunk, peer_of(e, transfers.back().with_next), buffer});
  }
  exchange_group(e.groups, transfers.data(), transfers.size(), nccl_data_type<Element>(), e.stream);
  for (const Action& a : step) {
    const int key = key_of(e, a.microbatch, a.chunk);
    if (a.kind == ActionKind::send_forward && e.recompute) give_back(e.sends, key);
    if (a.kind == ActionKind::send_backward) give_back(e.grad_inputs, key);
  }
}

template <typename Element>
void check_views(const Executor<Element>& e, const std::vector<ParameterTensors<Element>>& views,
                 const char* function) {
  if (views.size() != e.chunks.size())
    throw std::runtime_error(std::string(function) + ": " + std::to_string(views.size()) + " chunks' views for " +
                             std::to_string(e.chunks.size()) + " chunks");
}

size_t pool_bytes(const BufferPool& pool) { return pool.bytes * pool.buffers.size(); }

template <typename Element>
void update_accounting(Executor<Element>& e) {
  ExecutorAccounting& a = e.accounting;
  a.slots.clear();
  a.slot_bytes.clear();
  a.activation_bytes = a.working_set_bytes;
  for (const ChunkState<Element>& state : e.chunks) {
    const size_t bytes =
        state.inputs.bytes + (e.recompute ? 0 : activation_bytes<Element>(e.config, e.B, e.T, state.range));
    a.slots.push_back(int(state.inputs.buffers.size()));
    a.slot_bytes.push_back(bytes);
    a.activation_bytes += bytes * state.inputs.buffers.size();
  }
  a.transfer_bytes = pool_bytes(e.sends) + pool_bytes(e.grad_outputs) + pool_bytes(e.grad_inputs);
  a.step_ms.assign(e.schedule.size(), 0.0f);
  a.busy_ms = 0;
  for (size_t i = 0; i < e.schedule.size(); ++i) {
    CUDA_CHECK(cudaEventElapsedTime(&a.step_ms[i], e.step_start[i], e.step_end[i]));
    if (is_compute(e.schedule[i])) a.busy_ms += a.step_ms[i];
  }
  float span = 0;
  if (!e.schedule.empty()) CUDA_CHECK(cudaEventElapsedTime(&span, e.step_start.front(), e.step_end.back()));
  a.span_ms = span;
}

}  // namespace

template <typename Element>
Executor<Element> create_executor(const GPTConfig& config, int B, int T, const StageSchedule& schedule,
                                  const std::vector<LayerRange>& chunk_ranges, int p, int stage, bool recompute,
                                  const CommGroups& groups, cublasHandle_t cublas, cudaStream_t stream) {
  Executor<Element> e{};
  e.config = config;
  e.B = B;
  e.T = T;
  e.p = p;
  e.v = int(chunk_ranges.size());
  e.stage = stage;
  e.recompute = recompute;
  e.schedule = schedule;
  e.groups = groups;
  e.cublas = cublas;
  e.stream = stream;
  const size_t btc_bytes = size_t(B) * T * config.channels * sizeof(Element);
  e.sends = make_pool(btc_bytes);
  e.grad_outputs = make_pool(btc_bytes);
  e.grad_inputs = make_pool(btc_bytes);
  for (const LayerRange& range : chunk_ranges) {
    ChunkState<Element> state{range, make_pool(stage_input_bytes<Element>(config, B, T, range)), {}, {}, -1,
                              create_backward_scratch<Element>(config, B, T, range)};
    if (recompute) {
      state.working = create_activations<Element>(config, B, T, range);
      e.accounting.working_set_bytes += state.working.bytes;
    }
    e.chunks.push_back(std::move(state));
  }
  e.targets = device_alloc<int>(size_t(B) * T);
  e.progress = std::make_shared<ExecutorProgress>();
  e.trace.resize(schedule.size());
  e.step_start.resize(schedule.size());
  e.step_end.resize(schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    CUDA_CHECK(cudaEventCreate(&e.step_start[i]));
    CUDA_CHECK(cudaEventCreate(&e.step_end[i]));
  }
  return e;
}

template <typename Element>
void destroy_executor(Executor<Element>& e) {
  for (ChunkState<Element>& state : e.chunks) {
    destroy_pool(state.inputs);
    for (Activations<Element>& acts : state.acts) destroy_activations(acts);
    if (e.recompute) destroy_activations(state.working);
    destroy_backward_scratch(state.scratch);
  }
  destroy_pool(e.sends);
  destroy_pool(e.grad_outputs);
  destroy_pool(e.grad_inputs);
  device_free(e.targets);
  for (cudaEvent_t event : e.step_start) CUDA_CHECK(cudaEventDestroy(event));
  for (cudaEvent_t event : e.step_end) CUDA_CHECK(cudaEventDestroy(event));
  e = Executor<Element>{};
}

template <typename Element>
double execute_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params,
                    const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head,
                    const int* host_tokens, const int* host_targets, double loss_scale) {
  check_views(e, params, "execute_step");
  check_views(e, grads, "execute_step");
  double loss_sum = 0;
  for (ChunkState<Element>& state : e.chunks) state.working_microbatch = -1;
  ExecutorProgress& progress = *e.progress;
  {
    std::lock_guard<std::mutex> lock(progress.mutex);
    progress.walks += 1;
    progress.walking = true;
    progress.queued = 0;
  }
  for (size_t i = 0; i < e.schedule.size(); ++i) {
    const Step& step = e.schedule[i];
    const std::string name = to_text(step);
    nvtxRangePushA(name.c_str());
    {
      std::lock_guard<std::mutex> lock(progress.mutex);
      CUDA_CHECK(cudaEventRecord(e.step_start[i], e.stream));
    }
    if (!is_compute(step)) {
      transfer_step(e, step, e.trace[i]);
    } else if (step[0].kind == ActionKind::forward) {
      loss_sum += forward_step(e, params, step[0].microbatch, step[0].chunk, host_tokens, host_targets, loss_scale,
                               e.trace[i]);
    } else {
      backward_step(e, params, grads, grad_wte_head, step[0].microbatch, step[0].chunk, host_targets, loss_scale,
                    e.trace[i]);
    }
    {
      std::lock_guard<std::mutex> lock(progress.mutex);
      CUDA_CHECK(cudaEventRecord(e.step_end[i], e.stream));
      progress.queued = int(i) + 1;
    }
    nvtxRangePop();
  }
  CUDA_CHECK(cudaStreamSynchronize(e.stream));
  {
    std::lock_guard<std::mutex> lock(progress.mutex);
    progress.walking = false;
  }
  update_accounting(e);
  return loss_sum;
}

template <typename Element>
ForwardResult<Element> execute_forward(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params,
                                       const int* host_tokens, const int* host_targets, int B, int T) {
  check_views(e, params, "execute_forward");
  if (B > e.B || T > e.T) throw std::runtime_error("execute_forward: the microbatch is larger than the executor's");
  ForwardResult<Element> result{0.0, nullptr};
  const size_t BT = size_t(B) * T, count = BT * e.config.channels;
  const int key = -1;  // a key no training microbatch uses; chunk c's is key - c
  {
    std::lock_guard<std::mutex> lock(e.progress->mutex);
    e.progress->walks += 1;
  }
  nvtxRangePushA("forward only");
  for (int chunk = 0; chunk < e.v; ++chunk) {
    ChunkState<Element>& state = e.chunks[chunk];
    int slot;
    if (state.range.has_embedding) {
      slot = take_slot(e, chunk, key - chunk);
      CUDA_CHECK(cudaMemcpyAsync(state.inputs.buffers[slot], host_tokens, BT * sizeof(int), cudaMemcpyHostToDevice,
                                 e.stream));
    } else if (hands_over_locally(e)) {
      slot = held(state.inputs, key - chunk);
    } else {
      slot = take_slot(e, chunk, key - chunk);
      recv_forward(e.groups, state.inputs.buffers[slot], count, nccl_data_type<Element>(), e.stream);
    }
    forward_chunk(e, params, chunk, slot, host_targets, 1.0, B, T);
    const Activations<Element>& acts = activations_of(e, chunk, slot);
    if (state.range.has_head) {
      if (host_targets != nullptr) result.loss = mean_loss(acts, B, T, e.stream);
      result.logits = acts.logits;
    } else if (hands_over_locally(e)) {
      const int next = take_slot(e, chunk + 1, key - chunk - 1);
      copy_device(e.chunks[chunk + 1].inputs.buffers[next], range_output(acts), count * sizeof(Element), e.stream);
    } else {
      send_forward(e.groups, range_output(acts), count, nccl_data_type<Element>(), e.stream);
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

std::string to_text(const ExecutedStep& step) {
  const auto named = [](ActionKind kind, int microbatch, int chunk) {
    return to_text(Action{kind, microbatch, 0}) + "@c" + std::to_string(chunk);
  };
  if (step.compute) {
    std::string text = named(step.kind, step.microbatch, step.chunk) + " slot " + std::to_string(step.slot);
    if (step.output_buffer >= 0) text += " output " + std::to_string(step.output_buffer);
    if (step.recomputed) text += " (recomputed)";
    return text;
  }
  std::string text;
  for (const ExecutedMessage& m : step.messages) {
    const bool outgoing = m.kind == ActionKind::send_forward || m.kind == ActionKind::send_backward;
    text += (text.empty() ? "" : " + ") + named(m.kind, m.microbatch, m.chunk) + (outgoing ? "->" : "<-") +
            std::to_string(m.peer) + " buffer " + std::to_string(m.buffer);
  }
  return text;
}

std::string trace_text(const std::vector<ExecutedStep>& trace) {
  std::string text;
  for (const ExecutedStep& step : trace) text += (text.empty() ? "" : "; ") + to_text(step);
  return text;
}

#define INSTANTIATE_EXECUTOR(Element)                                                                               \
  template SchedulePosition schedule_position<Element>(const Executor<Element>&);                                   \
  template Executor<Element> create_executor<Element>(const GPTConfig&, int, int, const StageSchedule&,             \
                                                      const std::vector<LayerRange>&, int, int, bool,               \
                                                      const CommGroups&, cublasHandle_t, cudaStream_t);             \
  template void destroy_executor<Element>(Executor<Element>&);                                                      \
  template double execute_step<Element>(Executor<Element>&, const std::vector<ParameterTensors<Element>>&,          \
                                        const std::vector<ParameterTensors<Element>>&, Element*, const int*,        \
                                        const int*, double);                                                        \
  template ForwardResult<Element> execute_forward<Element>(Executor<Element>&,                                      \
                                                           const std::vector<ParameterTensors<Element>>&,           \
                                                           const int*, const int*, int, int);

INSTANTIATE_EXECUTOR(float)
INSTANTIATE_EXECUTOR(__nv_bfloat16)
