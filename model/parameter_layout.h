// Where one pipeline stage's parameters live. A stage allocates only the tensors of what it
// computes (its gradients and AdamW moments have the same layout): wte (once, when the stage has
// the embedding or the head: the tied output projection reads it), wpe with the embedding, then
// for each chunk, in chunk order, its layers in order, each layer's 12 tensors together in
// llm.c's order (layer-major: a layer is one contiguous range, so that its gradients can be
// summed over the replicas in one call as soon as they are final, comm/data_parallel_sum.h),
// then lnfw and lnfb with the head. The regions map each piece of the stage allocation to its
// place in llm.c's layout of the whole model (tensor-major), for uploads, gathers, checkpoints,
// the norm's slots and bf16's stochastic rounding; they are in increasing order of offset but for
// the tied copy of wte (listed with the head, placed first).
//
// With tensor parallelism (model/tensor_parallel_shard.h) a tp rank's allocation has the same
// order with only its shard of each tensor: its rows of wte, its slices of the column- and
// row-parallel layers, the replicated tensors whole. A region of a sliced tensor is then not one
// run of llm.c's layout: its cut says which part of the layer's matrix it is.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <vector>

#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameters.h"
#include "model/tensor_parallel_shard.h"

// A piece of a stage's parameters: one tensor outside the layers, or one layer's slice of a
// per-layer tensor.
struct ParameterRegion {
  int tensor;          // a ParameterTensor
  int layer;           // the slice's layer; 0 for wte, wpe, lnfw, lnfb
  size_t offset;       // elements into the stage's allocation
  size_t full_offset;  // elements into the whole model in llm.c's layout
  size_t count;
  bool tied_copy;      // wte on a stage with the head but not the embedding: the first stage's copy
  // None: count consecutive elements at full_offset. Else the tp rank's slice of the layer's
  // matrix (OC, C) at full_offset (a bias: (OC, 1)), count = its local_out * local_in.
  std::optional<LinearSlice> cut = std::nullopt;
};

struct ParameterLayout {
  std::vector<LayerRange> chunks;
  // Per chunk, each tensor's offset in the stage allocation (per-layer tensors: of the chunk's
  // first layer's slice), kNotHeld for the tensors the chunk does not use.
  std::vector<std::array<size_t, kNumParameterTensors>> chunk_offsets;
  // Chunk by chunk, each chunk's in norm-slot order: embeddings, layers (each layer's tensors in
  // llm.c's order), head. They cover the stage allocation exactly once.
  std::vector<ParameterRegion> regions;
  size_t size;       // elements of the stage allocation
  size_t full_size;  // num_parameters: elements of the whole model
  size_t layer_stride;  // the shard's parameters_per_layer: from one layer's slice of a tensor to the next layer's
  TensorParallelRank shard;  // {1, 0}: the whole tensors
};

inline constexpr size_t kNotHeld = ~size_t(0);

// The layout of the stage whose chunks are chunks (split_layers' ranges of one stage, in order),
// for tp rank shard of the stage's tp ranks (default: the whole tensors, no tensor parallelism).
// Throws std::invalid_argument (one line) when shard.tp does not divide the heads, 4 C or Vp.
ParameterLayout parameter_layout(const GPTConfig& config, const std::vector<LayerRange>& chunks,
                                 TensorParallelRank shard = {});

// The elements of the stage's tied copy of wte (its region with tied_copy, first in the
// allocation): Vp C, or the tp rank's rows of it, on a stage with the head but not the embedding;
// 0 elsewhere.
size_t tied_copy_count(const ParameterLayout& layout);

// Chunk c's views into a stage allocation (memory: layout.size elements): the model's
// ParameterTensors with first_layer = the chunk's first layer and the stage's layer_stride,
// nullptr for tensors not used.
template <typename T>
ParameterTensors<T> chunk_views(T* memory, const ParameterLayout& layout, int chunk) {
  ParameterTensors<T> views;
  views.first_layer = layout.chunks[chunk].first_layer;
  views.layer_stride = layout.layer_stride;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const size_t offset = layout.chunk_offsets[chunk][i];
    views.*kParameterTensorMembers<T>[i] = offset == kNotHeld ? nullptr : memory + offset;
  }
  return views;
}

// Every chunk's views, index = chunk.
template <typename T>
std::vector<ParameterTensors<T>> stage_views(T* memory, const ParameterLayout& layout) {
  std::vector<ParameterTensors<T>> views;
  for (size_t c = 0; c < layout.chunks.size(); ++c) views.push_back(chunk_views(memory, layout, int(c)));
  return views;
}

// Host copies between the two layouts, for float (the checkpoints' values) and double (checks).
// The stage allocation's values (layout.size) taken from a whole model in llm.c's layout (a tp
// rank's: its slices cut from the full layers, cut_linear_slice).
template <typename Value>
std::vector<Value> to_stage_layout(const ParameterLayout& layout, const std::vector<Value>& full);
// The stage's values (layout.size) written into their places in full (layout.full_size, llm.c's
// layout), the rest left as it is: every tp rank's stage placed in turn gives the whole stage.
template <typename Value>
void place_in_full_layout(const ParameterLayout& layout, const std::vector<Value>& stage, std::vector<Value>& full);
// A whole model in llm.c's layout (layout.full_size) holding the stage's values (layout.size)
// in its regions and zeros elsewhere.
template <typename Value>
std::vector<Value> to_full_layout(const ParameterLayout& layout, const std::vector<Value>& stage);
