// The executor's steps (pipeline/execute_steps.h): the forward, the backward (whole, or its I),
// the W, and the grouped transfers of one stage, with the pools' takes and gives-back.
#include "pipeline/execute_steps.h"

#include <algorithm>
#include <stdexcept>

#include "comm/nccl_types.h"
#include "comm/p2p.h"
#include "kernels/cuda_check.cuh"

namespace {

// Microbatch k's block of host (m, B, T), or nullptr on a stage given none.
const int* microbatch_of(const int* host, int k, size_t BT) { return host == nullptr ? nullptr : host + k * BT; }

void copy_device(void* destination, const void* source, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream));
}

// Microbatch k's activation (or its gradient): B T_k C elements (the rank's B T_k C / tp with
// sequence parallelism), at the start of a buffer sized for B T C.
template <typename Element>
size_t btc_elements(const Executor<Element>& e, int microbatch) {
  return size_t(e.B) * length_of(e, microbatch) / e.sequence_shards() * e.config.channels;
}

template <typename Element>
int virtual_stage_of(const Executor<Element>& e, int chunk) { return e.placement.virtual_stage(e.stage, chunk); }

void record_compute(ExecutedStep& record, ActionKind kind, int microbatch, int chunk, int slot) {
  record.compute = true;
  record.kind = kind;
  record.microbatch = microbatch;
  record.chunk = chunk;
  record.slot = slot;
  record.output_buffer = -1;
  record.weight_inputs = -1;
  record.recomputed = false;
  record.stream = 0;
  record.messages.clear();  // keeps its capacity: no allocation after the first step
}

// The model's per-layer report for the B or W that is its chunk's last in the schedule (after
// it the chunk's parameter gradients are final), when the owner asked for reports; else empty.
template <typename Element>
LayerGradientsQueued final_gradient_reports(const Executor<Element>& e, const Action& action) {
  if (!e.gradients_final) return {};
  const int last = e.last_gradient_step[action.chunk];
  if (last < 0 || !(e.schedule[last][0] == action)) return {};
  return [&e, chunk = action.chunk](int layer) { e.gradients_final(chunk, layer); };
}

}  // namespace

template <typename Element>
int key_of(const Executor<Element>& e, int microbatch, int chunk) { return microbatch * e.v + chunk; }

template <typename Element>
int length_of(const Executor<Element>& e, int microbatch) { return e.shape.lengths[microbatch - e.first_microbatch]; }

template <typename Element>
double loss_scale_of(const Executor<Element>& e, int microbatch) {
  return e.shape.loss_scales.empty() ? e.shape.loss_scale : e.shape.loss_scales[microbatch - e.first_microbatch];
}

// Every microbatch of the schedule has a length in [1, T]: a longer one would overrun the buffers
// sized for T, a missing one would be read past the lengths' end.
template <typename Element>
void check_lengths(const Executor<Element>& e, const std::vector<int>& lengths) {
  int microbatches = 0;
  for (const Step& step : e.schedule)
    for (const Action& a : step) microbatches = std::max(microbatches, a.microbatch - e.first_microbatch + 1);
  if (int(lengths.size()) < microbatches)
    throw std::runtime_error("execute_step: " + std::to_string(lengths.size()) + " microbatch lengths for a schedule of " +
                             std::to_string(microbatches) + " microbatches");
  for (size_t k = 0; k < lengths.size(); ++k)
    if (lengths[k] < 1 || lengths[k] > e.T)
      throw std::runtime_error("execute_step: microbatch " + std::to_string(k) + " has T = " +
                               std::to_string(lengths[k]) + ", not in [1, maxT = " + std::to_string(e.T) + "]");
}

template <typename Element>
int stage_of(const Executor<Element>& e, int virtual_stage) { return e.placement.stage_of(virtual_stage); }

template <typename Element>
int local_next_chunk(const Executor<Element>& e, int chunk) {
  const int next = virtual_stage_of(e, chunk) + 1;
  if (next >= e.placement.virtual_stages() || stage_of(e, next) != e.stage) return -1;
  return e.placement.chunk_of(next);
}

template <typename Element>
int local_previous_chunk(const Executor<Element>& e, int chunk) {
  const int previous = virtual_stage_of(e, chunk) - 1;
  if (previous < 0 || stage_of(e, previous) != e.stage) return -1;
  return e.placement.chunk_of(previous);
}

template <typename Element>
int take_slot(Executor<Element>& e, int chunk, int key) { return take(e.chunks[chunk].inputs, key); }

namespace {

// The buffers each kind of schedule step takes and gives back: host bookkeeping only, called by
// the step functions below around their device work and by plan_pools alone, so that the plan
// walks exactly the takes and gives-back of a step. Indices into their pools, -1: none.
struct ForwardBuffers {
  int slot;           // the input's slot: taken on the first virtual stage, else held since the input came
  int output_buffer;  // taken: the next chunk's slot (a local hand-over) or, with recompute, a send buffer
};
struct BackwardBuffers {
  int slot;           // held: the forward's
  int grad_output;    // held: the output gradient (none on the head)
  int grad_input;     // taken: the previous chunk's output gradient (a local hand-over), else a send
                      // buffer (none on the embedding)
  int weight_inputs;  // taken by I: what its W will read
};

template <typename Element>
ForwardBuffers take_forward_buffers(Executor<Element>& e, int microbatch, int chunk) {
  ChunkState<Element>& state = e.chunks[chunk];
  const int key = key_of(e, microbatch, chunk);
  ForwardBuffers buffers{state.range.has_embedding ? take_slot(e, chunk, key) : held(state.inputs, key), -1};
  if (state.range.has_head) return buffers;
  const int next = local_next_chunk(e, chunk);
  if (next >= 0) buffers.output_buffer = take_slot(e, next, key_of(e, microbatch, next));
  else if (e.recompute) buffers.output_buffer = take(e.sends, key);
  return buffers;
}

template <typename Element>
BackwardBuffers take_backward_buffers(Executor<Element>& e, const Action& action) {
  ChunkState<Element>& state = e.chunks[action.chunk];
  const int key = key_of(e, action.microbatch, action.chunk);
  BackwardBuffers buffers{held(state.inputs, key), -1, -1, -1};
  if (!state.range.has_head) buffers.grad_output = held(e.grad_outputs, key);
  if (!state.range.has_embedding) {
    const int previous = local_previous_chunk(e, action.chunk);
    buffers.grad_input = previous >= 0 ? take(e.grad_outputs, key_of(e, action.microbatch, previous))
                                       : take(e.grad_inputs, key);
  }
  if (action.kind == ActionKind::backward_input) buffers.weight_inputs = take(state.weight_pool, key);
  return buffers;
}

template <typename Element>
void give_back_backward_buffers(Executor<Element>& e, const Action& action) {
  const int key = key_of(e, action.microbatch, action.chunk);
  give_back(e.chunks[action.chunk].inputs, key);
  if (!e.chunks[action.chunk].range.has_head) give_back(e.grad_outputs, key);
}

template <typename Element>
void give_back_weight_buffer(Executor<Element>& e, const Action& action) {
  give_back(e.chunks[action.chunk].weight_pool, key_of(e, action.microbatch, action.chunk));
}

template <typename Element>
int take_message_buffer(Executor<Element>& e, const Action& a) {
  const int key = key_of(e, a.microbatch, a.chunk);
  switch (a.kind) {
    case ActionKind::send_forward: return held(e.recompute ? e.sends : e.chunks[a.chunk].inputs, key);
    case ActionKind::recv_forward: return take_slot(e, a.chunk, key);
    case ActionKind::send_backward: return held(e.grad_inputs, key);
    case ActionKind::recv_backward: return take(e.grad_outputs, key);
    default: throw std::runtime_error("executor: " + to_text(a) + " in a transfer step");
  }
}

template <typename Element>
void give_back_message_buffers(Executor<Element>& e, const Step& step) {
  for (const Action& a : step) {
    const int key = key_of(e, a.microbatch, a.chunk);
    if (a.kind == ActionKind::send_forward && e.recompute) give_back(e.sends, key);
    if (a.kind == ActionKind::send_backward) give_back(e.grad_inputs, key);
  }
}

}  // namespace

template <typename Element>
void plan_pools(Executor<Element>& e) {
  for (const Step& step : e.schedule) {
    if (!is_compute(step)) {
      for (const Action& a : step) take_message_buffer(e, a);
      give_back_message_buffers(e, step);
      continue;
    }
    const Action& a = step[0];
    if (a.kind == ActionKind::forward) {
      take_forward_buffers(e, a.microbatch, a.chunk);
    } else if (a.kind == ActionKind::backward_weight) {
      give_back_weight_buffer(e, a);
    } else {
      take_backward_buffers(e, a);
      give_back_backward_buffers(e, a);
    }
  }
}

template <typename Element>
Activations<Element>& activations_of(Executor<Element>& e, int chunk, int slot) {
  ChunkState<Element>& state = e.chunks[chunk];
  return e.recompute ? state.working : state.acts[slot];
}

template <typename Element>
void forward_chunk(Executor<Element>& e, const ComputeStream& on, const std::vector<ParameterTensors<Element>>& params,
                   int chunk, int slot, const int* host_targets, double loss_scale, int B, int T) {
  ChunkState<Element>& state = e.chunks[chunk];
  const void* input = state.inputs.buffers[slot];
  const int* targets = nullptr;
  if (state.range.has_head && host_targets != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(e.targets, host_targets, size_t(B) * T * sizeof(int), cudaMemcpyHostToDevice,
                               on.stream));
    targets = e.targets;
  }
  const bool tokens = state.range.has_embedding;
  gpt_forward(e.config, state.range, params[chunk], activations_of(e, chunk, slot),
              tokens ? static_cast<const int*>(input) : nullptr,
              tokens ? nullptr : static_cast<const Element*>(input), targets, loss_scale, B, T, on.cublas, on.stream,
              e.tensor_parallel);
}

// F(microbatch, chunk): the forward, then the output's hand-over: into the next chunk's slot
// (a local hand-over), or, with recompute (whose working set a later step may overwrite before
// the send), into a send buffer. Without recompute the send reads the slot's activations, alive
// until B or I.
template <typename Element>
void forward_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& params, int microbatch,
                  int chunk, const int* host_tokens, const int* host_targets, ExecutedStep& record) {
  ChunkState<Element>& state = e.chunks[chunk];
  const size_t block = size_t(e.B) * e.T;
  const int T = length_of(e, microbatch);
  const ForwardBuffers buffers = take_forward_buffers(e, microbatch, chunk);
  const int slot = buffers.slot;
  if (state.range.has_embedding)
    CUDA_CHECK(cudaMemcpyAsync(state.inputs.buffers[slot],
                               microbatch_of(host_tokens, microbatch - e.first_microbatch, block),
                               size_t(e.B) * T * sizeof(int), cudaMemcpyHostToDevice, e.stream));
  const double loss_scale = loss_scale_of(e, microbatch);
  forward_chunk(e, {e.stream, e.cublas}, params, chunk, slot,
                microbatch_of(host_targets, microbatch - e.first_microbatch, block), loss_scale, e.B, T);
  record_compute(record, ActionKind::forward, microbatch, chunk, slot);
  record.output_buffer = buffers.output_buffer;
  if (e.recompute) state.working_microbatch = microbatch;
  const Activations<Element>& acts = activations_of(e, chunk, slot);
  if (state.range.has_head) {
    add_mean_loss(acts, e.B, T, e.shape.loss_divisor, e.loss_sum, e.stream);
    return;
  }
  const size_t output_bytes = btc_elements(e, microbatch) * sizeof(Element);
  const int next = local_next_chunk(e, chunk);
  if (next >= 0)
    copy_device(e.chunks[next].inputs.buffers[buffers.output_buffer], range_output(acts), output_bytes, e.stream);
  else if (e.recompute)
    copy_device(e.sends.buffers[buffers.output_buffer], range_output(acts), output_bytes, e.stream);
}

// B or I (microbatch, chunk): the forward again if the working set holds another microbatch's,
// the backward (for I its input-gradient half, filling a weight-gradient-input buffer), then
// the slot and the output gradient go back. The input gradient goes to a send buffer, or on a
// local hand-over straight into the previous chunk's output gradient.
template <typename Element>
void backward_step(Executor<Element>& e, const ComputeStream& on, const std::vector<ParameterTensors<Element>>& params,
                   const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head, const Action& action,
                   const int* host_targets, ExecutedStep& record) {
  const int microbatch = action.microbatch, chunk = action.chunk;
  ChunkState<Element>& state = e.chunks[chunk];
  const BackwardBuffers buffers = take_backward_buffers(e, action);
  const int slot = buffers.slot;
  const int T = length_of(e, microbatch);
  record_compute(record, action.kind, microbatch, chunk, slot);
  record.stream = on.stream == e.stream ? 0 : 1;
  if (e.recompute && state.working_microbatch != microbatch) {
    forward_chunk(e, on, params, chunk, slot,
                  microbatch_of(host_targets, microbatch - e.first_microbatch, size_t(e.B) * e.T),
                  loss_scale_of(e, microbatch), e.B, T);
    state.working_microbatch = microbatch;
    record.recomputed = true;
  }
  const void* input = state.inputs.buffers[slot];
  const bool embedding = state.range.has_embedding;
  const Element* grad_output =
      state.range.has_head ? nullptr : static_cast<const Element*>(e.grad_outputs.buffers[buffers.grad_output]);
  Element* grad_input = nullptr;
  if (!embedding) {
    const BufferPool& pool = local_previous_chunk(e, chunk) >= 0 ? e.grad_outputs : e.grad_inputs;
    grad_input = static_cast<Element*>(pool.buffers[buffers.grad_input]);
  }
  const int* tokens = embedding ? static_cast<const int*>(input) : nullptr;
  const Element* input_activation = embedding ? nullptr : static_cast<const Element*>(input);
  if (action.kind == ActionKind::backward) {
    const LayerGradientsQueued reports = final_gradient_reports(e, action);
    gpt_backward(e.config, state.range, params[chunk], grads[chunk], state.range.has_head ? grad_wte_head : nullptr,
                 activations_of(e, chunk, slot), state.scratch, tokens, input_activation, grad_output, grad_input, e.B,
                 T, on.cublas, on.stream, reports, e.tensor_parallel);
    if (reports) reports(-1);
  } else {
    record.weight_inputs = buffers.weight_inputs;
    gpt_backward_input(e.config, state.range, params[chunk], activations_of(e, chunk, slot), state.scratch, tokens,
                       input_activation, grad_output, grad_input, state.weight_inputs[record.weight_inputs], e.B, T,
                       on.cublas, on.stream, e.tensor_parallel);
  }
  give_back_backward_buffers(e, action);
}

// W (microbatch, chunk): the parameter gradients from the buffer its I filled, which goes back.
template <typename Element>
void weight_step(Executor<Element>& e, const std::vector<ParameterTensors<Element>>& grads, Element* grad_wte_head,
                 const Action& action, ExecutedStep& record) {
  ChunkState<Element>& state = e.chunks[action.chunk];
  const int key = key_of(e, action.microbatch, action.chunk);
  record_compute(record, ActionKind::backward_weight, action.microbatch, action.chunk, -1);
  record.weight_inputs = held(state.weight_pool, key);
  const LayerGradientsQueued reports = final_gradient_reports(e, action);
  gpt_backward_weight(e.config, state.range, grads[action.chunk], state.range.has_head ? grad_wte_head : nullptr,
                      state.weight_inputs[record.weight_inputs], state.scratch, e.B, length_of(e, action.microbatch),
                      e.cublas, e.stream, reports, e.tensor_parallel);
  if (reports) reports(-1);
  give_back_weight_buffer(e, action);
}

// A step of sends and receives: one NCCL group in the listed order, on the transfer stream;
// receives take their buffers first, sends give theirs back after (the buffer remembers this
// step, so the next compute that writes it waits for the send). The group waits only for the
// last compute that used one of its buffers: the one that produced a send's data, or the last
// reader of a receive's buffer (a slot or an output gradient given back earlier), not for the
// computes queued since. Each message goes to the stage that holds the virtual stage at its other end,
// B T_k C elements of microbatch k: its two ends agree on T_k without asking each other, since
// every rank runs the same step's lengths (execute_step).
template <typename Element>
void transfer_step(Executor<Element>& e, size_t index, const Step& step, ExecutedStep& record) {
  std::vector<Transfer> transfers;
  record.compute = false;
  record.messages.clear();
  // Per compute stream (ExecutedStep::stream): the last compute there that used one of the group's
  // buffers. An overlapped pair's forward and backward end on two streams, and the later of the two
  // in the schedule says nothing of the other's end.
  int after_compute[2] = {-1, -1};
  const auto use = [&](BufferPool& pool, int buffer) {
    const int step = pool.compute_step[buffer];
    if (step >= 0) after_compute[e.trace[step].stream] = std::max(after_compute[e.trace[step].stream], step);
    pool.transfer_step[buffer] = int(index);
  };
  for (const Action& a : step) {
    const int vs = virtual_stage_of(e, a.chunk);
    ChunkState<Element>& state = e.chunks[a.chunk];
    const int buffer = take_message_buffer(e, a);
    const size_t count = btc_elements(e, a.microbatch);
    int peer;
    switch (a.kind) {
      case ActionKind::send_forward: {
        use(e.recompute ? e.sends : state.inputs, buffer);
        // Without recompute the send reads the slot's activations.
        const void* output = e.recompute ? e.sends.buffers[buffer] : range_output(state.acts[buffer]);
        peer = stage_of(e, vs + 1);
        transfers.push_back({true, false, const_cast<void*>(output), count});
        break;
      }
      case ActionKind::recv_forward:
        use(state.inputs, buffer);
        peer = stage_of(e, vs - 1);
        transfers.push_back({false, false, state.inputs.buffers[buffer], count});
        break;
      case ActionKind::send_backward:
        use(e.grad_inputs, buffer);
        peer = stage_of(e, vs - 1);
        transfers.push_back({true, false, e.grad_inputs.buffers[buffer], count});
        break;
      default:  // recv_backward (take_message_buffer refused the rest)
        use(e.grad_outputs, buffer);
        peer = stage_of(e, vs + 1);
        transfers.push_back({false, false, e.grad_outputs.buffers[buffer], count});
        break;
    }
    // comm/p2p.h names a peer as the next or the previous stage of the ring.
    transfers.back().with_next = peer == (e.stage + 1) % e.p;
    record.messages.push_back({a.kind, a.microbatch, a.chunk, -1, buffer});
  }
  for (const int after : after_compute)
    if (after >= 0 && e.transfer_stream != e.stream)
      CUDA_CHECK(cudaStreamWaitEvent(e.transfer_stream, e.step_end[after], 0));
  record_step_event(e, e.step_start[index], e.transfer_stream);
  exchange_group(e.groups, transfers.data(), transfers.size(), nccl_data_type<Element>(), e.transfer_stream);
  for (size_t k = 0; k < transfers.size(); ++k) record.messages[k].peer = transfers[k].peer;  // the transport's
  give_back_message_buffers(e, step);
}

// Mirrors forward_step's and backward_step's takes and holds.
template <typename Element>
BufferUses compute_uses(Executor<Element>& e, const Action& a) {
  BufferUses uses;
  const auto add = [&](BufferPool& pool, int index) { uses.uses[uses.count++] = {&pool, index}; };
  ChunkState<Element>& state = e.chunks[a.chunk];
  const int key = key_of(e, a.microbatch, a.chunk);
  if (a.kind == ActionKind::forward) {
    add(state.inputs, state.range.has_embedding ? next_take(state.inputs) : held(state.inputs, key));
    if (state.range.has_head) return uses;
    const int next = local_next_chunk(e, a.chunk);
    if (next >= 0) add(e.chunks[next].inputs, next_take(e.chunks[next].inputs));
    else if (e.recompute) add(e.sends, next_take(e.sends));
  } else if (computes_input_gradient(a.kind)) {
    add(state.inputs, held(state.inputs, key));
    if (!state.range.has_head) add(e.grad_outputs, held(e.grad_outputs, key));
    if (!state.range.has_embedding)
      add(local_previous_chunk(e, a.chunk) >= 0 ? e.grad_outputs : e.grad_inputs,
          local_previous_chunk(e, a.chunk) >= 0 ? next_take(e.grad_outputs) : next_take(e.grad_inputs));
  }
  return uses;
}

template <typename Element>
void record_step_event(Executor<Element>& e, cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(e.progress->mutex);
  CUDA_CHECK(cudaEventRecord(event, stream));
}

#define INSTANTIATE_EXECUTOR_STEPS(Element)                                                                         \
  template int key_of<Element>(const Executor<Element>&, int, int);                                                 \
  template int length_of<Element>(const Executor<Element>&, int);                                                   \
  template double loss_scale_of<Element>(const Executor<Element>&, int);                                            \
  template void check_lengths<Element>(const Executor<Element>&, const std::vector<int>&);                          \
  template int local_next_chunk<Element>(const Executor<Element>&, int);                                            \
  template int local_previous_chunk<Element>(const Executor<Element>&, int);                                        \
  template int stage_of<Element>(const Executor<Element>&, int);                                                    \
  template int take_slot<Element>(Executor<Element>&, int, int);                                                    \
  template void plan_pools<Element>(Executor<Element>&);                                                            \
  template Activations<Element>& activations_of<Element>(Executor<Element>&, int, int);                             \
  template void forward_chunk<Element>(Executor<Element>&, const ComputeStream&,                                    \
                                       const std::vector<ParameterTensors<Element>>&, int, int, const int*, double, \
                                       int, int);                                                                   \
  template void forward_step<Element>(Executor<Element>&, const std::vector<ParameterTensors<Element>>&, int,       \
                                      int, const int*, const int*, ExecutedStep&);                                  \
  template void backward_step<Element>(Executor<Element>&, const ComputeStream&,                                    \
                                       const std::vector<ParameterTensors<Element>>&,                               \
                                       const std::vector<ParameterTensors<Element>>&, Element*, const Action&,      \
                                       const int*, ExecutedStep&);                                                  \
  template void weight_step<Element>(Executor<Element>&, const std::vector<ParameterTensors<Element>>&, Element*,   \
                                     const Action&, ExecutedStep&);                                                 \
  template void transfer_step<Element>(Executor<Element>&, size_t, const Step&, ExecutedStep&);                     \
  template BufferUses compute_uses<Element>(Executor<Element>&, const Action&);                                     \
  template void record_step_event<Element>(Executor<Element>&, cudaEvent_t, cudaStream_t);

INSTANTIATE_EXECUTOR_STEPS(float)
INSTANTIATE_EXECUTOR_STEPS(__nv_bfloat16)
