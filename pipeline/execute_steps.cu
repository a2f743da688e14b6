// The executor's steps (pipeline/execute_steps.h): the forward, the backward (whole, or its I),
// the W, and the grouped transfers of one stage, with the pools' takes and gives-back.
#include "pipeline/execute_steps.h"

#include <stdexcept>

#include "comm/p2p.h"
#include "kernels/cuda_check.cuh"

namespace {

// Microbatch k's (B, T) of host (m, B, T), or nullptr on a stage given none.
const int* microbatch_of(const int* host, int k, size_t BT) { return host == nullptr ? nullptr : host + k * BT; }

void copy_device(void* destination, const void* source, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream));
}

size_t btc_floats(const Executor& e) { return size_t(e.B) * e.T * e.config.channels; }

int virtual_stage_of(const Executor& e, int chunk) { return e.placement.virtual_stage(e.stage, chunk); }

void record_compute(ExecutedStep& record, ActionKind kind, int microbatch, int chunk, int slot) {
  record.compute = true;
  record.kind = kind;
  record.microbatch = microbatch;
  record.chunk = chunk;
  record.slot = slot;
  record.output_buffer = -1;
  record.weight_inputs = -1;
  record.recomputed = false;
  record.messages.clear();  // keeps its capacity: no allocation after the first step
}

// The chunk's weight-gradient-input buffer for key, with its views made when the pool allocates it.
int take_weight_inputs(Executor& e, int chunk, int key) {
  ChunkState& state = e.chunks[chunk];
  const int index = take(state.weight_pool, key);
  if (size_t(index) == state.weight_inputs.size())
    state.weight_inputs.push_back(
        weight_gradient_inputs_at<float>(state.weight_pool.buffers[index], e.config, e.B, e.T, state.range));
  return index;
}

}  // namespace

int key_of(const Executor& e, int microbatch, int chunk) { return microbatch * e.v + chunk; }

int stage_of(const Executor& e, int virtual_stage) { return e.placement.stage_of(virtual_stage); }

int local_next_chunk(const Executor& e, int chunk) {
  const int next = virtual_stage_of(e, chunk) + 1;
  if (next >= e.placement.virtual_stages() || stage_of(e, next) != e.stage) return -1;
  return e.placement.chunk_of(next);
}

int local_previous_chunk(const Executor& e, int chunk) {
  const int previous = virtual_stage_of(e, chunk) - 1;
  if (previous < 0 || stage_of(e, previous) != e.stage) return -1;
  return e.placement.chunk_of(previous);
}

int take_slot(Executor& e, int chunk, int key) {
  ChunkState& state = e.chunks[chunk];
  const int index = take(state.inputs, key);
  if (!e.recompute && size_t(index) == state.acts.size())
    state.acts.push_back(create_activations<float>(e.config, e.B, e.T, state.range));
  return index;
}

Activations<float>& activations_of(Executor& e, int chunk, int slot) {
  ChunkState& state = e.chunks[chunk];
  return e.recompute ? state.working : state.acts[slot];
}

void forward_chunk(Executor& e, const std::vector<ParameterTensors<float>>& params, int chunk, int slot,
                   const int* host_targets, double loss_scale, int B, int T) {
  ChunkState& state = e.chunks[chunk];
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
              tokens ? nullptr : static_cast<const float*>(input), targets, loss_scale, B, T, e.cublas, e.stream);
}

// F(microbatch, chunk): the forward, then the output's hand-over: into the next chunk's slot
// (a local hand-over), or, with recompute (whose working set a later step may overwrite before
// the send), into a send buffer. Without recompute the send reads the slot's activations, alive
// until B or I.
double forward_step(Executor& e, const std::vector<ParameterTensors<float>>& params, int microbatch, int chunk,
                    const int* host_tokens, const int* host_targets, double loss_scale, ExecutedStep& record) {
  ChunkState& state = e.chunks[chunk];
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
  const Activations<float>& acts = activations_of(e, chunk, slot);
  if (state.range.has_head) return mean_loss(acts, e.B, e.T, e.stream);
  const size_t output_bytes = btc_floats(e) * sizeof(float);
  const int next = local_next_chunk(e, chunk);
  if (next >= 0) {
    record.output_buffer = take_slot(e, next, key_of(e, microbatch, next));
    copy_device(e.chunks[next].inputs.buffers[record.output_buffer], range_output(acts), output_bytes, e.stream);
  } else if (e.recompute) {
    record.output_buffer = take(e.sends, key);
    copy_device(e.sends.buffers[record.output_buffer], range_output(acts), output_bytes, e.stream);
  }
  return 0;
}

// B or I (microbatch, chunk): the forward again if the working set holds another microbatch's,
// the backward (for I its input-gradient half, filling a weight-gradient-input buffer), then
// the slot and the output gradient go back. The input gradient goes to a send buffer, or on a
// local hand-over straight into the previous chunk's output gradient.
void backward_step(Executor& e, const std::vector<ParameterTensors<float>>& params,
                   const std::vector<ParameterTensors<float>>& grads, float* grad_wte_head, const Action& action,
                   const int* host_targets, double loss_scale, ExecutedStep& record) {
  const int microbatch = action.microbatch, chunk = action.chunk;
  ChunkState& state = e.chunks[chunk];
  const int key = key_of(e, microbatch, chunk);
  const int slot = held(state.inputs, key);
  const size_t BT = size_t(e.B) * e.T;
  record_compute(record, action.kind, microbatch, chunk, slot);
  if (e.recompute && state.working_microbatch != microbatch) {
    forward_chunk(e, params, chunk, slot, microbatch_of(host_targets, microbatch, BT), loss_scale, e.B, e.T);
    state.working_microbatch = microbatch;
    record.recomputed = true;
  }
  const void* input = state.inputs.buffers[slot];
  const bool embedding = state.range.has_embedding;
  const float* grad_output =
      state.range.has_head ? nullptr : static_cast<const float*>(e.grad_outputs.buffers[held(e.grad_outputs, key)]);
  float* grad_input = nullptr;
  if (!embedding) {
    const int previous = local_previous_chunk(e, chunk);
    const int index = previous >= 0 ? take(e.grad_outputs, key_of(e, microbatch, previous)) : take(e.grad_inputs, key);
    grad_input = static_cast<float*>(previous >= 0 ? e.grad_outputs.buffers[index] : e.grad_inputs.buffers[index]);
  }
  const int* tokens = embedding ? static_cast<const int*>(input) : nullptr;
  const float* input_activation = embedding ? nullptr : static_cast<const float*>(input);
  if (action.kind == ActionKind::backward) {
    gpt_backward(e.config, state.range, params[chunk], grads[chunk], state.range.has_head ? grad_wte_head : nullptr,
                 activations_of(e, chunk, slot), state.scratch, tokens, input_activation, grad_output, grad_input, e.B,
                 e.T, e.cublas, e.stream);
  } else {
    record.weight_inputs = take_weight_inputs(e, chunk, key);
    gpt_backward_input(e.config, state.range, params[chunk], activations_of(e, chunk, slot), state.scratch, tokens,
                       input_activation, grad_output, grad_input, state.weight_inputs[record.weight_inputs], e.B, e.T,
                       e.cublas, e.stream);
  }
  give_back(state.inputs, key);
  if (!state.range.has_head) give_back(e.grad_outputs, key);
}

// W (microbatch, chunk): the parameter gradients from the buffer its I filled, which goes back.
void weight_step(Executor& e, const std::vector<ParameterTensors<float>>& grads, float* grad_wte_head,
                 const Action& action, ExecutedStep& record) {
  ChunkState& state = e.chunks[action.chunk];
  const int key = key_of(e, action.microbatch, action.chunk);
  record_compute(record, ActionKind::backward_weight, action.microbatch, action.chunk, -1);
  record.weight_inputs = held(state.weight_pool, key);
  gpt_backward_weight(e.config, state.range, grads[action.chunk], state.range.has_head ? grad_wte_head : nullptr,
                      state.weight_inputs[record.weight_inputs], state.scratch, e.B, e.T, e.cublas, e.stream);
  give_back(state.weight_pool, key);
}

// A step of sends and receives: one NCCL group in the listed order; receives take their
// buffers first, sends give theirs back after (the stream orders any reuse after the send).
// Each message goes to the stage that holds the virtual stage at its other end.
void transfer_step(Executor& e, const Step& step, ExecutedStep& record) {
  std::vector<Transfer> transfers;
  const size_t count = btc_floats(e);
  record.compute = false;
  record.messages.clear();
  for (const Action& a : step) {
    const int key = key_of(e, a.microbatch, a.chunk);
    const int vs = virtual_stage_of(e, a.chunk);
    int buffer, peer;
    switch (a.kind) {
      case ActionKind::send_forward: {
        ChunkState& state = e.chunks[a.chunk];
        buffer = e.recompute ? held(e.sends, key) : held(state.inputs, key);
        const void* output = e.recompute ? e.sends.buffers[buffer] : range_output(state.acts[buffer]);
        peer = stage_of(e, vs + 1);
        transfers.push_back({true, false, const_cast<void*>(output), count});
        break;
      }
      case ActionKind::recv_forward:
        buffer = take_slot(e, a.chunk, key);
        peer = stage_of(e, vs - 1);
        transfers.push_back({false, false, e.chunks[a.chunk].inputs.buffers[buffer], count});
        break;
      case ActionKind::send_backward:
        buffer = held(e.grad_inputs, key);
        peer = stage_of(e, vs - 1);
        transfers.push_back({true, false, e.grad_inputs.buffers[buffer], count});
        break;
      case ActionKind::recv_backward:
        buffer = take(e.grad_outputs, key);
        peer = stage_of(e, vs + 1);
        transfers.push_back({false, false, e.grad_outputs.buffers[buffer], count});
        break;
      default:
        throw std::runtime_error("executor: " + to_text(a) + " in a transfer step");
    }
    // comm/p2p.h names a peer as the next or the previous stage of the ring.
    transfers.back().with_next = peer == (e.stage + 1) % e.p;
    record.messages.push_back({a.kind, a.microbatch, a.chunk, peer, buffer});
  }
  exchange_group(e.groups, transfers.data(), transfers.size(), ncclFloat32, e.stream);
  for (const Action& a : step) {
    const int key = key_of(e, a.microbatch, a.chunk);
    if (a.kind == ActionKind::send_forward && e.recompute) give_back(e.sends, key);
    if (a.kind == ActionKind::send_backward) give_back(e.grad_inputs, key);
  }
}
