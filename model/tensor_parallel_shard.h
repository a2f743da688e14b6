// What one tensor-parallel rank holds of a GPT (issue 33, docs/pipeline.md "Tensor
// parallelism"): the slices of a block's four linear layers, and the shard's tensor sizes.
//
//   qkvw, qkvb       column-parallel by heads (attention_qkv_slice): NH / tp heads' q, k, v rows
//   attprojw         row-parallel: the C / tp input columns of the rank's heads; attprojb whole
//   fcw, fcb         column-parallel: 4 C / tp hidden rows
//   fcprojw          row-parallel: 4 C / tp input columns; fcprojb whole
//   wte              vocabulary-parallel: rows [r Vp / tp, (r + 1) Vp / tp), also the tied head's
//   wpe, ln1, ln2, lnf   replicated: the same on every tp rank
//
// With tp = 1 every slice is the whole tensor and the sizes are parameter_tensor_sizes'.
#pragma once
#include <array>
#include <cstddef>
#include <optional>

#include "model/config.h"
#include "model/parameters.h"
#include "model/tensor_parallel_linear.h"

// A rank of a stage's tp ranks; {1, 0}: the whole model (no tensor parallelism).
struct TensorParallelRank {
  int tp = 1;
  int rank = 0;
};

// The rank's slices of one block's linear layers (the same for every layer).
struct BlockSlices {
  LinearSlice qkv;      // C -> 3 C, column-parallel by heads
  LinearSlice attproj;  // C -> C, row-parallel
  LinearSlice fc;       // C -> 4 C, column-parallel
  LinearSlice fcproj;   // 4 C -> C, row-parallel
};
// Throws std::invalid_argument (one line) when tp does not divide the heads or 4 C.
BlockSlices block_slices(const GPTConfig& config, TensorParallelRank shard);

// How the rank's part of per-layer tensor `tensor` is cut from one layer's slice of it, as a
// LinearSlice of an (OC, C) matrix; a bias is an (OC, 1) matrix, cut as its weight's rows. None
// for the tensors the rank holds whole (LayerNorms, row-parallel biases) and with tp = 1.
std::optional<LinearSlice> tensor_cut(const GPTConfig& config, TensorParallelRank shard, int tensor);

// Whether every tp rank holds the whole of tensor `tensor` (a ParameterTensor), with the same values
// and gradients: wpe, the LayerNorms, lnf and the row-parallel biases. What reads a stage's regions
// as parts of the whole model (the gradient norm, a checkpoint's gather) takes it from one tp rank.
bool replicated_on_tp_ranks(int tensor);

// Elements of each tensor the rank holds (per-layer tensors: all L layers' slices), in llm.c's
// order; parameter_tensor_sizes with tp = 1.
std::array<size_t, kNumParameterTensors> shard_tensor_sizes(const GPTConfig& config, TensorParallelRank shard);
