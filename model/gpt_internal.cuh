// What model/gpt.cu and model/gpt_split_backward.cu share: carving one allocation into views,
// the checks every range function makes, where a block's input is, and a tp rank's sizes,
// groups and head slice.
#pragma once
#include <stdexcept>
#include <string>

#include "comm/mesh.h"
#include "kernels/attention.cuh"
#include "kernels/fused_attention.cuh"
#include "model/gpt.cuh"
#include "model/tensor_parallel_linear.h"

namespace gpt_internal {

// Hands out consecutive pieces of one allocation, each aligned to 256 bytes (cudaMalloc's
// alignment, so a view is as aligned as a buffer of its own). With a null base it only
// counts: the same code then gives the size and, once allocated, the views.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename X>
  X* take(size_t count) {
    X* piece = base_ ? reinterpret_cast<X*>(base_ + bytes_) : nullptr;
    bytes_ += (count * sizeof(X) + kAlignment - 1) / kAlignment * kAlignment;
    return piece;
  }
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kAlignment = 256;
  char* base_;
  size_t bytes_ = 0;
};

inline std::string describe(const LayerRange& range) {
  return "layer range [" + std::to_string(range.first_layer) + ", " + std::to_string(range.end_layer) + ")";
}

inline bool same_range(const LayerRange& a, const LayerRange& b) {
  return a.first_layer == b.first_layer && a.end_layer == b.end_layer && a.has_embedding == b.has_embedding &&
         a.has_head == b.has_head;
}

// The sizes a tp rank's buffers are cut to: the attention on NH / tp heads of C / tp channels, the
// MLP's hidden layer of 4C / tp, the logits' Vp / tp vocabulary columns.
struct LocalSizes {
  size_t C, NH, hidden, Vp;
};
inline LocalSizes local_sizes(const GPTConfig& config, int tp) {
  check_tensor_parallel_sizes(tp, config.num_heads, config.channels, config.padded_vocab_size);
  return {size_t(config.channels / tp), size_t(config.num_heads / tp), size_t(4 * config.channels / tp),
          size_t(config.padded_vocab_size / tp)};
}

// The groups the tensor-parallel layers are given: the run's, or with tp = 1 a stand-in whose mesh
// says tp 1, with which the layers are today's kernels and call no collective.
inline const CommGroups& layer_groups(const TensorParallelRun& tp) {
  static const CommGroups single = [] {
    CommGroups groups{};
    groups.mesh.tp = 1;
    return groups;
  }();
  return tp.groups ? *tp.groups : single;
}

// Into how many shards the residual stream's B T rows are cut: tp with sequence parallelism, which
// needs tp > 1 and tp dividing T (each sequence length a run uses), else 1.
inline int sequence_shards(int T, int tp, bool sequence_parallel) {
  if (!sequence_parallel) return 1;
  if (tp < 2) throw std::runtime_error("sequence parallelism needs tp > 1 (tp " + std::to_string(tp) + ")");
  if (T % tp != 0)
    throw std::runtime_error("sequence parallelism: tp " + std::to_string(tp) +
                             " does not divide the sequence length " + std::to_string(T));
  return tp;
}

// Buffers (activations, scratch, weight-gradient inputs) run at the tp they were made for.
inline void check_tensor_parallelism(int made_for, const TensorParallelRun& tp, const std::string& where,
                                     bool sequence_parallel = false) {
  if (made_for != tp.tp())
    throw std::runtime_error(where + ": buffers made for tp " + std::to_string(made_for) + ", run at tp " +
                             std::to_string(tp.tp()));
  if (sequence_parallel != tp.sequence_parallel)
    throw std::runtime_error(where + (sequence_parallel ? ": buffers made for" : ": buffers made without") +
                             " sequence parallelism");
}

// The tied output projection, lnf (B T, C) -> the rank's logits (B T, Vp / tp): column-parallel
// over the vocabulary, the rank's wte rows as its weight.
inline LinearSlice head_slice(const GPTConfig& config, const TensorParallelRun& tp) {
  return column_parallel_slice(tp.tp(), tp.rank(), config.channels, config.padded_vocab_size);
}

// The checks shared by forward and backward: the parameters' views hold the range's layers (as
// far as they tell), the buffers were made for this range and hold (B, T).
template <typename Element>
void check_call(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                const Activations<Element>& acts, const int* tokens, const Element* input, int B, int T,
                const char* function) {
  const std::string where = std::string(function) + ": " + describe(range);
  if (params.first_layer > range.first_layer)
    throw std::runtime_error(where + ": the parameter views start at layer " + std::to_string(params.first_layer));
  if (!same_range(range, acts.range)) throw std::runtime_error(where + ": activations were made for another range");
  if (B < 1 || T < 1 || B > acts.B || T > acts.T || T > config.max_seq_len)
    throw std::runtime_error(where + ": B " + std::to_string(B) + ", T " + std::to_string(T) +
                             " outside the activations' B " + std::to_string(acts.B) + ", T " + std::to_string(acts.T) +
                             " (and maxT " + std::to_string(config.max_seq_len) + ")");
  if (range.has_embedding && !tokens) throw std::runtime_error(where + ": the embedding needs tokens");
  if (!range.has_embedding && !input) throw std::runtime_error(where + ": a range without the embedding needs input");
}

// The input of block l (the embedding output, the range input, or the previous block's output).
template <typename Element>
const Element* block_input(const Activations<Element>& acts, const Element* input, int l) {
  const int i = l - acts.range.first_layer;
  if (i > 0) return acts.blocks[i - 1].residual3;
  return acts.range.has_embedding ? acts.encoded : input;
}

// The input of the final LayerNorm: the last block's output, or the block-less range's input.
template <typename Element>
const Element* head_input(const Activations<Element>& acts, const Element* input) {
  return block_input(acts, input, acts.range.end_layer);
}

// Where block a's forward writes the qkv projection: the fused attention's backward reads it, so
// there each block keeps its own; the materialised one copies q, k, v into its saved state, so
// there all blocks share one forward-only buffer.
template <typename Element>
Element* block_qkv(const Activations<Element>& acts, const BlockActivations<Element>& a) {
  return acts.attention_kind == AttentionKind::fused ? a.qkv : acts.qkv;
}

// The block's attention, qkv (B, T, 3C) -> a.attention_out (B, T, C), on NH heads of C channels
// (the rank's, with tensor parallelism), saving what the backward reads in a.
template <typename Element>
void block_attention_forward(cublasHandle_t cublas, const Activations<Element>& acts,
                             const BlockActivations<Element>& a, int B, int T, int C, int NH, cudaStream_t stream) {
  if (acts.attention_kind == AttentionKind::fused)
    fused_attention_forward(a.attention_out, a.lse, a.qkv, B, T, C, NH, stream);
  else
    attention_forward(cublas, a.attention_out, a.attention_saved, acts.projection, acts.qkv, B, T, C, NH, stream);
}

// dqkv (B, T, 3C) = the gradient of block a's qkv from dout (B, T, C), the gradient of its attention_out.
template <typename Element>
void block_attention_backward(cublasHandle_t cublas, Element* dqkv, BackwardScratch<Element>& scratch,
                              const Element* dout, const Activations<Element>& acts,
                              const BlockActivations<Element>& a, int B, int T, int C, int NH, cudaStream_t stream) {
  if (scratch.attention_kind != acts.attention_kind)
    throw std::runtime_error("the backward scratch was made for the other attention than the activations");
  if (acts.attention_kind == AttentionKind::fused)
    fused_attention_backward(dqkv, scratch.fused_attention, dout, a.qkv, a.attention_out, a.lse, B, T, C, NH, stream);
  else
    attention_backward(cublas, dqkv, scratch.attention, dout, a.attention_saved, B, T, C, NH, stream);
}

// gpt_forward and gpt_backward with sequence parallelism (model/gpt_sequence_parallel.cu), called
// by them after their checks when tp.sequence_parallel.
template <typename Element>
void gpt_forward_sequence_parallel(const GPTConfig& config, const LayerRange& range,
                                   const ParameterTensors<Element>& params, Activations<Element>& acts,
                                   const int* tokens, const Element* input, const int* targets, double loss_scale,
                                   int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                                   const TensorParallelRun& tp);
template <typename Element>
void gpt_backward_sequence_parallel(const GPTConfig& config, const LayerRange& range,
                                    const ParameterTensors<Element>& params, const ParameterTensors<Element>& grads,
                                    Element* grad_wte_head, const Activations<Element>& acts,
                                    BackwardScratch<Element>& scratch, const int* tokens, const Element* input,
                                    const Element* grad_output, Element* grad_input, int B, int T,
                                    cublasHandle_t cublas, cudaStream_t stream, const LayerGradientsQueued& layer_done,
                                    const TensorParallelRun& tp);
// gpt_backward_input with sequence parallelism (model/gpt_split_backward_sequence_parallel.cu),
// called by it after its checks when tp.sequence_parallel.
template <typename Element>
void gpt_backward_input_sequence_parallel(const GPTConfig& config, const LayerRange& range,
                                          const ParameterTensors<Element>& params, const Activations<Element>& acts,
                                          BackwardScratch<Element>& scratch, const int* tokens, const Element* input,
                                          const Element* grad_output, Element* grad_input,
                                          WeightGradientInputs<Element>& w, int B, int T, cublasHandle_t cublas,
                                          cudaStream_t stream, const TensorParallelRun& tp);
// dweight (C) += sums[0, C), dbias (C) += sums[C, 2C): a LayerNorm's parameter gradients summed
// over tp (sequence parallelism), added as every tp rank adds them.
template <typename Element>
void add_layernorm_sums(Element* dweight, Element* dbias, const Element* sums, int C, cudaStream_t stream);

}  // namespace gpt_internal
