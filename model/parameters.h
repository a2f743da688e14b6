// GPT-2's parameters in llm.c's order and shapes: the sizes of the 16 tensors, named
// views into one allocation (parameters, or gradients, which mirror them), layer l's
// slices, which tensors get weight decay, and GPT-2's initialisation from a seed.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.h"

// The tensors in llm.c's order; the allocation holds them back to back in this order.
enum ParameterTensor : int {
  kWte,       // (Vp, C)     token embedding, tied to the output projection
  kWpe,       // (maxT, C)   position embedding
  kLn1w,      // (L, C)
  kLn1b,      // (L, C)
  kQkvw,      // (L, 3C, C)
  kQkvb,      // (L, 3C)
  kAttprojw,  // (L, C, C)
  kAttprojb,  // (L, C)
  kLn2w,      // (L, C)
  kLn2b,      // (L, C)
  kFcw,       // (L, 4C, C)
  kFcb,       // (L, 4C)
  kFcprojw,   // (L, C, 4C)
  kFcprojb,   // (L, C)
  kLnfw,      // (C)
  kLnfb,      // (C)
  kNumParameterTensors
};

// Elements of each tensor, in llm.c's order.
std::array<size_t, kNumParameterTensors> parameter_tensor_sizes(const GPTConfig& config);
// Element offset of each tensor in the allocation (the sum of the sizes before it).
std::array<size_t, kNumParameterTensors> parameter_tensor_offsets(const GPTConfig& config);
// Elements of the whole allocation (124,475,904 for GPT-2 small with Vp = 50304).
size_t num_parameters(const GPTConfig& config);
// Elements of one transformer block (the 12 per-layer tensors' slices).
size_t parameters_per_layer(const GPTConfig& config);

// llm.c's name of a tensor ("wte", "qkvw", ...).
const char* parameter_tensor_name(int tensor);
// ln1w .. fcprojb: one slice per layer, layer l's at l * (size / L) within the tensor.
bool parameter_tensor_is_per_layer(int tensor);
// GPT-2 decays the matrices and embeddings (wte, wpe, qkvw, attprojw, fcw, fcprojw),
// not the biases or LayerNorm parameters.
bool parameter_tensor_has_weight_decay(int tensor);

struct ParametersPending;  // model/parameters_pending.h

// Named views of the 16 tensors (host or device): into one allocation of num_parameters
// elements in llm.c's layout (point_views), or of one pipeline chunk's tensors, whose per-layer
// tensors hold only the chunk's layers from first_layer on, layer by layer (layer_stride;
// model/parameter_layout.h).
template <typename T>
struct ParameterTensors {
  T* wte;       // (Vp, C)
  T* wpe;       // (maxT, C)
  T* ln1w;      // (L, C)
  T* ln1b;      // (L, C)
  T* qkvw;      // (L, 3C, C)
  T* qkvb;      // (L, 3C)
  T* attprojw;  // (L, C, C)
  T* attprojb;  // (L, C)
  T* ln2w;      // (L, C)
  T* ln2b;      // (L, C)
  T* fcw;       // (L, 4C, C)
  T* fcb;       // (L, 4C)
  T* fcprojw;   // (L, C, 4C)
  T* fcprojb;   // (L, C)
  T* lnfw;      // (C)
  T* lnfb;      // (C)
  int first_layer = 0;  // the layer whose slice starts each per-layer tensor
  // 0: each per-layer tensor's slices are back to back (llm.c's layout); else layer l + 1's slice
  // of every per-layer tensor is layer_stride elements after layer l's (one layer's 12 slices
  // together, as a pipeline stage allocates them).
  size_t layer_stride = 0;
  // Events a forward waits for before it reads a layer's tensors, which another stream may still be
  // writing (ZeRO-1's all-gather: model/parameters_pending.h); nullptr: none. Not owned.
  const ParametersPending* pending = nullptr;
};

// One transformer block's slices of the per-layer tensors.
template <typename T>
struct LayerParameters {
  T* ln1w;      // (C)
  T* ln1b;      // (C)
  T* qkvw;      // (3C, C)
  T* qkvb;      // (3C)
  T* attprojw;  // (C, C)
  T* attprojb;  // (C)
  T* ln2w;      // (C)
  T* ln2b;      // (C)
  T* fcw;       // (4C, C)
  T* fcb;       // (4C)
  T* fcprojw;   // (C, 4C)
  T* fcprojb;   // (C)
};

// The members of ParameterTensors in llm.c's order, so that code can loop over tensors.
template <typename T>
using ParameterTensorMember = T* ParameterTensors<T>::*;
template <typename T>
inline constexpr ParameterTensorMember<T> kParameterTensorMembers[kNumParameterTensors] = {
    &ParameterTensors<T>::wte,      &ParameterTensors<T>::wpe,      &ParameterTensors<T>::ln1w,
    &ParameterTensors<T>::ln1b,     &ParameterTensors<T>::qkvw,     &ParameterTensors<T>::qkvb,
    &ParameterTensors<T>::attprojw, &ParameterTensors<T>::attprojb, &ParameterTensors<T>::ln2w,
    &ParameterTensors<T>::ln2b,     &ParameterTensors<T>::fcw,      &ParameterTensors<T>::fcb,
    &ParameterTensors<T>::fcprojw,  &ParameterTensors<T>::fcprojb,  &ParameterTensors<T>::lnfw,
    &ParameterTensors<T>::lnfb};

// Views of the 16 tensors at their offsets in memory (num_parameters(config) elements).
template <typename T>
ParameterTensors<T> point_views(T* memory, const GPTConfig& config) {
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(config);
  ParameterTensors<T> views;
  for (int i = 0; i < kNumParameterTensors; ++i) views.*kParameterTensorMembers<T>[i] = memory + offsets[i];
  return views;
}

// The view of tensor i (a ParameterTensor index).
template <typename T>
T* tensor_view(const ParameterTensors<T>& views, int tensor) {
  return views.*kParameterTensorMembers<T>[tensor];
}

// Layer l's slices: each per-layer tensor advanced by l - p.first_layer times its per-layer size
// (or p.layer_stride).
template <typename T>
LayerParameters<T> layer_views(const ParameterTensors<T>& p, const GPTConfig& config, int layer) {
  const size_t C = config.channels, l = layer - p.first_layer;
  const auto at = [&](T* tensor, size_t per_layer) {
    return tensor + l * (p.layer_stride != 0 ? p.layer_stride : per_layer);
  };
  return {at(p.ln1w, C),         at(p.ln1b, C),     at(p.qkvw, 3 * C * C), at(p.qkvb, 3 * C),
          at(p.attprojw, C * C), at(p.attprojb, C), at(p.ln2w, C),         at(p.ln2b, C),
          at(p.fcw, 4 * C * C),  at(p.fcb, 4 * C),  at(p.fcprojw, 4 * C * C), at(p.fcprojb, C)};
}

// GPT-2's initialisation; resizes host to num_parameters(config). Weights N(0, 0.02),
// attprojw and fcprojw N(0, 0.02 / sqrt(2L)) (residual projections, so that the residual
// stream's variance does not grow with depth), biases 0, LayerNorm weights 1, wte's
// padded rows V..Vp-1 zero. The random numbers: each tensor, and each layer's slice of
// a per-layer tensor, has its own std::mt19937_64 seeded from (seed, tensor, layer) by
// splitmix64; its 64-bit outputs become uniforms on 53 bits and normals by Box-Muller
// (both of each pair, in double, rounded to float). So the values are the same on every
// machine and compiler, and layer l's values do not depend on the other layers or on L
// (apart from the 1/sqrt(2L) scale).
void init_gpt2_parameters(std::vector<float>& host, const GPTConfig& config, uint64_t seed);
