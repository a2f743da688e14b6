// GPT-2's forward and backward for a layer range: transformer blocks [first_layer,
// end_layer), optionally preceded by the token and position embedding and followed by
// the final LayerNorm, the tied output projection and the fused classifier. The whole
// model is one range; a pipeline stage is a smaller one. Everything a range's forward
// writes and its backward reads lives in one Activations allocation per microbatch slot,
// the backward's working buffers in one BackwardScratch; nothing is allocated inside
// forward or backward. Instantiated for double (checks), float and __nv_bfloat16.
//
// Tensor parallelism (issue 33, docs/pipeline.md): given a TensorParallelRun, a range runs on its
// tp rank's shard (model/tensor_parallel_shard.h): each block's QKV and fc1 column-parallel, the
// attention on the rank's NH / tp heads, the attention projection and fc2 row-parallel, the
// LayerNorms and the residual stream replicated, the embedding and the loss vocabulary-parallel
// (model/vocab_parallel.h). Its activations and scratch are made for the same tp.
//
// Sequence parallelism (TensorParallelRun::sequence_parallel, Korthikanti et al. 2022): the
// LayerNorms and the residual stream hold a shard of B T / tp token rows on each tp rank (rank r
// rows [r B T / tp, (r + 1) B T / tp) of the B T rows), gathered before each column-parallel layer
// and reduce-scattered after each row-parallel one (model/gpt_sequence_parallel.cu).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <type_traits>
#include <vector>

#include "kernels/element.cuh"
#include "model/attention_kind.h"
#include "model/config.h"
#include "model/parameters.h"
#include "model/tensor_parallel_linear.h"

// A pointer parameter that callers may pass as a plain nullptr: Element is deduced from the
// other arguments (std::type_identity_t keeps this one out of template argument deduction).
template <typename Element>
using Nullable = std::type_identity_t<Element>;

// What one pipeline stage computes. {0, L, true, true} is the whole model.
struct LayerRange {
  int first_layer;     // the first transformer block of the range
  int end_layer;       // one past the last block; first_layer == end_layer: no blocks
  bool has_embedding;  // tokens -> wte + wpe before the blocks (the first stage)
  bool has_head;       // final LayerNorm, logits = lnf wte^T, loss after the blocks (the last stage)
};

// {0, L, true, true}.
LayerRange whole_model(const GPTConfig& config);

// Throws std::runtime_error with one line naming the problem: layers outside [0, L],
// end_layer < first_layer, or a range that computes nothing.
void validate_layer_range(const GPTConfig& config, const LayerRange& range);

// The tensor parallelism a range runs with: its stage's tp group and the communication stream and
// events of the column-parallel backward's overlap (create_tensor_parallel_overlap, made once by
// the caller). The default, no groups, is tp = 1: the whole tensors, today's kernels, no collective.
struct TensorParallelRun {
  const CommGroups* groups = nullptr;
  TensorParallelOverlap overlap;
  // The residual stream's token rows sharded over the tp ranks (tp > 1 only): the range's input,
  // output and their gradients are the rank's shard of B T / tp rows.
  bool sequence_parallel = false;
  int tp() const { return groups ? groups->mesh.tp : 1; }
  int rank() const { return groups ? groups->mesh.tp_rank : 0; }
};

// One transformer block's saved activations, for one microbatch of B sequences of T tokens. With
// tensor parallelism the attention and the MLP's hidden layer are the rank's: NH / tp heads, C / tp
// of the attention's output channels, 4 C / tp hidden channels.
template <typename Element>
struct BlockActivations {
  Element* ln1;                // (B, T, C)   LayerNorm 1 of the block's input
  Compute<Element>* ln1_mean;  // (B, T)
  Compute<Element>* ln1_rstd;  // (B, T)
  Element* attention_saved;    // materialized: (attention_saved_size at C / tp, NH / tp) q, k, v, the probabilities
  Element* qkv;                // fused: (B, T, 3C / tp) the attention's input, which its backward reads
  Compute<Element>* lse;       // fused: (fused_attention_saved_size at NH / tp) a log-sum-exp per row
  Element* attention_out;      // (B, T, C / tp) the heads' outputs, input of the attention projection
  Element* residual2;          // (B, T, C)   block input + attention projection
  Element* ln2;                // (B, T, C)   LayerNorm 2 of residual2
  Compute<Element>* ln2_mean;  // (B, T)
  Compute<Element>* ln2_rstd;  // (B, T)
  Element* fch;                // (B, T, 4C / tp) the MLP's hidden layer before GELU
  Element* fch_gelu;           // (B, T, 4C / tp) after GELU
  Element* residual3;          // (B, T, C)   residual2 + MLP projection: the block's output
};

// One microbatch slot's activations for a range, views into one device allocation of
// activation_bytes<Element>(config, B, T, range) bytes. The range's input (tokens or the previous
// stage's output) is not part of it: the caller owns it, so that a slot can be refilled by
// running the forward again from the input alone.
template <typename Element>
struct Activations {
  void* memory;  // the allocation
  size_t bytes;  // its size
  LayerRange range;
  int B, T;          // the largest microbatch the views hold
  int tp;            // the tensor parallelism they are sized for
  bool sequence_parallel;  // ln*, their statistics, residual2, residual3 and lnf hold B T / tp rows
  AttentionKind attention_kind;  // the attention they hold the saved state of
  Element* encoded;  // (B, T, C)   embedding output, the first block's input (has_embedding only)
  std::vector<BlockActivations<Element>> blocks;  // blocks[l - first_layer]
  // Forward-only buffers, dead once the block's forward is done (the backward reads none):
  Element* qkv;         // (B, T, 3C / tp) the fused q, k, v projection of the rank's heads (materialized;
                        // the fused attention's backward reads it, so there each block keeps its own)
  Element* projection;  // (B, T, C)   the attention forward's scratch, then each projection's output
  Element* gathered;    // (B, T, C)   sequence parallel: a LayerNorm's output gathered over tp (forward only)
  // The head (has_head only):
  Element* lnf;                // (B, T, C)   final LayerNorm
  Compute<Element>* lnf_mean;  // (B, T)
  Compute<Element>* lnf_rstd;  // (B, T)
  Element* logits;             // (B, T, Vp / tp) logits (the rank's vocabulary columns); their gradient after a forward with targets
  Compute<Element>* losses;    // (B, T)      per-token cross-entropy (forward with targets)
  int* bad_target_row;         // (1)         -1, or the largest row whose target was outside [0, V)
  Compute<Element>* row_stats;  // (3 B T)    the vocabulary-parallel loss's row reductions (tp > 1 only)
};

// Bytes of one Activations allocation (what create_activations allocates, exactly), for a rank of
// tp tensor-parallel ranks (tp = 1: no tensor parallelism), the given attention and, with tp > 1,
// sequence parallelism (tp must divide T).
template <typename Element>
size_t activation_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int tp = 1,
                        AttentionKind attention = AttentionKind::materialized, bool sequence_parallel = false);
// Bytes of the range's input, which the caller keeps per microbatch: B T token ids for an
// embedding range, else B T C elements (B T C / tp, the rank's shard, sequence parallel at tp).
template <typename Element>
size_t stage_input_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int sequence_shards = 1);

// Throws std::runtime_error (one line) when tp does not divide the heads, 4 C or Vp.
template <typename Element>
Activations<Element> create_activations(const GPTConfig& config, int B, int T, const LayerRange& range, int tp = 1,
                                        AttentionKind attention = AttentionKind::materialized,
                                        bool sequence_parallel = false);
template <typename Element>
void destroy_activations(Activations<Element>& acts);

// The backward's working buffers, shared by all microbatches of a range (allocated once).
template <typename Element>
struct BackwardScratch {
  void* memory;
  size_t bytes;
  LayerRange range;
  int B, T;            // the largest microbatch the buffers hold
  int tp;              // the tensor parallelism they are sized for
  bool sequence_parallel;
  AttentionKind attention_kind;  // the attention they are sized for
  Element* dresidual;  // (B, T, C)  the residual stream's gradient (embedding ranges; others use grad_input)
  Element* dbtc;       // (B, T, C)  a LayerNorm output's or attention output's gradient
  Element* dqkv;       // (B, T, 3C / tp)
  Element* dfch;       // (B, T, 4C / tp) the MLP hidden layer's gradient (before and after GELU)
  Element* attention;  // materialized: (attention_backward_scratch_size at C / tp, NH / tp)
  Compute<Element>* fused_attention;  // fused: (fused_attention_backward_scratch_size at NH / tp)
  Compute<Element>* layernorm_weight;  // (layernorm_backward_weight_workspace_size)
  Compute<Element>* bias_gradient;     // (matmul_bias_gradient_workspace_size at OC = 4C) ranges with layers only
  int* embedding;                      // (embedding_backward_workspace_size) has_embedding only
  // Sequence parallel only:
  Element* gathered_gradient;   // (B, T, C) the residual stream's gradient gathered, then a partial input gradient
  Element* gathered_input;      // (B, T, C) a LayerNorm's saved output shard gathered again
  Element* layernorm_partials;  // (4 C)     a block's LayerNorm gradients over the rank's rows, summed over tp
};

template <typename Element>
size_t backward_scratch_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int tp = 1,
                              AttentionKind attention = AttentionKind::materialized, bool sequence_parallel = false);
template <typename Element>
BackwardScratch<Element> create_backward_scratch(const GPTConfig& config, int B, int T, const LayerRange& range,
                                                 int tp = 1, AttentionKind attention = AttentionKind::materialized,
                                                 bool sequence_parallel = false);
template <typename Element>
void destroy_backward_scratch(BackwardScratch<Element>& scratch);

// The forward of the range for B sequences of T tokens (B <= acts.B, T <= acts.T <= maxT).
// params holds at least the range's tensors: the whole model (point_views) or a pipeline
// chunk's views (model/parameter_layout.h), whose per-layer tensors start at params.first_layer.
// Input: tokens (B, T) on the device for an embedding range, else input (B, T, C); the other
// is nullptr. Writes (=) every activation of acts. With has_head: acts.logits = the logits,
// and when targets (B, T) is given, acts.losses = the per-token losses and acts.logits is
// overwritten by d(loss_scale * sum of losses) / d logits (loss_scale e.g. 1 / (B T
// microbatches) for the mean over a step), acts.bad_target_row is reset then set by the
// classifier. Without has_head the output is range_output(acts).
// Variable length (issue 34): each call may have its own T <= acts.T (buffers made once for maxT);
// it uses the first B T rows of every buffer and positions 0..T-1. Targets kIgnoredTarget
// (kernels/classifier.cuh: padding at a row's end) give loss 0 and no gradient, and loss_scale = 1 /
// the step's count of real targets makes the step's loss and gradient the mean over its real
// tokens, the same however they are split into microbatches (tests/gpt_variable_length_test.cu).
// With tp > 1 (acts made for the same tp): params are the rank's shard (parameter_layout with its
// TensorParallelRank), acts.logits its vocabulary columns, and the range's output, the losses and
// bad_target_row are the same on every tp rank (the losses bitwise: each rank computes them from
// the same reduced values). With tp.sequence_parallel (acts made for it, tp dividing T) input and
// range_output are the rank's shard, rows [r B T / tp, (r + 1) B T / tp) of the (B T, C) rows.
template <typename Element>
void gpt_forward(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                 Activations<Element>& acts, const int* tokens, const Nullable<Element>* input, const int* targets,
                 double loss_scale, int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                 const TensorParallelRun& tp = {});

// The range's output (B, T, C): the last block's residual3, or the embedding output of a
// range with no blocks. (With has_head the range's result is acts.losses and acts.logits.)
template <typename Element>
const Element* range_output(const Activations<Element>& acts);

// Called by a backward with a layer as soon as that layer's parameter-gradient kernels are queued
// (the layers from last to first), so that a caller may queue work that reads them (the
// data-parallel sum, comm/data_parallel_sum.h) while the backward goes on. An empty one is not called.
using LayerGradientsQueued = std::function<void(int layer)>;

// The backward of the range, after gpt_forward with targets (head) on the same acts and input.
// grad_output (B, T, C) is the gradient of range_output (nullptr with has_head, whose
// gradient starts from acts.logits). Parameter gradients of the range are accumulated (+=)
// into grads (same layout as params), the tied output projection's share of wte's gradient
// into grad_wte_head (Vp, C) (+=; nullptr without has_head), the embedding's into grads.wte. For a range without
// the embedding, grad_input (B, T, C) = the gradient of input (=); grad_input may not
// alias grad_output. tokens/input as given to the forward. layer_done: after each block's
// parameter gradients (lnfw and lnfb come before the last block's, wte and wpe after the first's).
// With tp > 1 (as the forward): grads and grad_wte_head (Vp / tp, C) are the rank's shard,
// grad_input is the same on every tp rank, and the replicated parameters (LayerNorms, wpe, the
// row-parallel biases, lnf) get bitwise the same gradient on every tp rank: each is computed from
// replicated values (the residual stream's gradient, the summed input gradients of the
// column-parallel layers) by the same kernels. With tp.sequence_parallel grad_output and
// grad_input are the rank's shard (B T / tp, C), and the LayerNorms' gradients are summed over tp
// before they are added (model/gpt_sequence_parallel.cu), so they too are the same on every rank.
template <typename Element>
void gpt_backward(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                  const ParameterTensors<Element>& grads, Nullable<Element>* grad_wte_head,
                  const Activations<Element>& acts, BackwardScratch<Element>& scratch, const int* tokens,
                  const Nullable<Element>* input, const Nullable<Element>* grad_output, Nullable<Element>* grad_input,
                  int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                  const LayerGradientsQueued& layer_done = {}, const TensorParallelRun& tp = {});

// The backward split in two (the zero-bubble schedules, pipeline/zero_bubble.h): I, the input
// gradient, which the previous stage waits for, and W, the parameter gradients, which nobody
// waits for. gpt_backward_input then gpt_backward_weight computes bitwise what gpt_backward
// does: the same kernels on the same values, each gradient tensor receiving the same additions in
// the same order, at any tp (tests/mpi/tensor_parallel_gpt_test.cu). With tp > 1 the
// column-parallel layers' input-gradient all-reduces (and the head's) are I's, as the previous
// stage waits for their sums; W communicates nothing (model/tensor_parallel_linear.h). Between
// the two a WeightGradientInputs holds everything W reads, copied or written by I, so that I may
// give the microbatch's activations back at once: each linear layer's input and output gradient,
// each LayerNorm's input, saved statistics and output gradient, the embedding's tokens and output
// gradient. Per block that is 20 C + 4 values a token, 8 C + 12 C / tp + 4 on a tp rank (the
// activations hold 16 C + NH T + 4 and the attention's and MLP's forward buffers). With sequence
// parallelism I gathers the linear layers' inputs and output gradients over tp and keeps them
// (all B T rows: W gathers nothing) and computes the LayerNorms' gradients, summed over tp once
// per block and microbatch, itself: 4 C + 12 C / tp values a token and 4 C a block
// (model/gpt_split_backward_sequence_parallel.cu).
template <typename Element>
struct BlockWeightInputs {
  Element* ln1_input;              // (B, T, C)  the block's input x
  Compute<Element>* ln1_mean;      // (B, T)
  Compute<Element>* ln1_rstd;      // (B, T)
  Element* dln1;                   // (B, T, C)  LayerNorm 1's output gradient
  Element* ln1;                    // (B, T, C)  the qkv projection's input
  Element* dqkv;                   // (B, T, 3C / tp) its output gradient
  Element* attention_out;          // (B, T, C / tp) the attention projection's input
  Element* dresidual2;             // (B, T, C)  its output gradient (the residual stream's at residual2)
  Element* residual2;              // (B, T, C)  LayerNorm 2's input
  Compute<Element>* ln2_mean;      // (B, T)
  Compute<Element>* ln2_rstd;      // (B, T)
  Element* dln2;                   // (B, T, C)  LayerNorm 2's output gradient
  Element* ln2;                    // (B, T, C)  the MLP's first layer's input
  Element* dfch;                   // (B, T, 4C / tp) its output gradient (through GELU's backward)
  Element* fch_gelu;               // (B, T, 4C / tp) the MLP projection's input
  Element* dresidual3;             // (B, T, C)  its output gradient (the residual stream's at residual3)
  // Sequence parallel, where the LayerNorms' inputs, statistics and output gradients above are
  // not held (nullptr): their gradients, which I computes and sums over tp (W adds them).
  Element* layernorm_sums;         // (4 C) ln2w, ln2b, ln1w, ln1b
};

template <typename Element>
struct WeightGradientInputs {
  void* memory;  // the allocation
  size_t bytes;  // its size
  LayerRange range;
  int B, T;
  int tp;             // the tensor parallelism they are sized for
  bool sequence_parallel;  // the linear layers' inputs and output gradients gathered (all B T rows)
  int* tokens;        // (B, T)  the embedding's (has_embedding only)
  Element* dencoded;  // (B, T, C) the embedding output's gradient (has_embedding only)
  std::vector<BlockWeightInputs<Element>> blocks;  // blocks[l - first_layer]
  // The head (has_head only):
  Element* lnf_input;          // (B, T, C)  the final LayerNorm's input
  Compute<Element>* lnf_mean;  // (B, T)
  Compute<Element>* lnf_rstd;  // (B, T)
  Element* dlnf;               // (B, T, C)  its output gradient
  Element* lnf;                // (B, T, C)  the output projection's input
  Element* dlogits;            // (B, T, Vp / tp) its output gradient (the rank's vocabulary columns)
  Element* lnf_sums;           // (2 C) sequence parallel: lnfw's and lnfb's gradients summed over tp
};

// Bytes of one WeightGradientInputs allocation (what create_weight_gradient_inputs allocates,
// exactly), for a rank of tp tensor-parallel ranks, with sequence parallelism or without.
template <typename Element>
size_t weight_gradient_input_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int tp = 1,
                                   bool sequence_parallel = false);
// Views into memory (weight_gradient_input_bytes of device memory the caller owns), or a new allocation.
template <typename Element>
WeightGradientInputs<Element> weight_gradient_inputs_at(void* memory, const GPTConfig& config, int B, int T,
                                                        const LayerRange& range, int tp = 1,
                                                        bool sequence_parallel = false);
template <typename Element>
WeightGradientInputs<Element> create_weight_gradient_inputs(const GPTConfig& config, int B, int T,
                                                            const LayerRange& range, int tp = 1,
                                                            bool sequence_parallel = false);
template <typename Element>
void destroy_weight_gradient_inputs(WeightGradientInputs<Element>& inputs);

// I: as gpt_backward, without any parameter gradient: grad_input (B, T, C) = the gradient of
// input (=) for a range without the embedding, and w (made for this range) filled (=) with what
// gpt_backward_weight reads. acts, scratch, tokens, input and grad_output as for gpt_backward;
// acts may be given back (or recomputed for another microbatch) once this is done. tp as for
// gpt_backward, acts, scratch and w made for its tp; collective over the tp ranks.
template <typename Element>
void gpt_backward_input(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                        const Activations<Element>& acts, BackwardScratch<Element>& scratch, const int* tokens,
                        const Nullable<Element>* input, const Nullable<Element>* grad_output,
                        Nullable<Element>* grad_input, WeightGradientInputs<Element>& w, int B, int T,
                        cublasHandle_t cublas, cudaStream_t stream, const TensorParallelRun& tp = {});

// W: the range's parameter gradients from w, accumulated (+=) into grads and (the head's share of
// wte's) into grad_wte_head, as gpt_backward does, calling layer_done as gpt_backward does. B and
// T and tp as given to gpt_backward_input; no communication.
template <typename Element>
void gpt_backward_weight(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& grads,
                         Nullable<Element>* grad_wte_head, const WeightGradientInputs<Element>& w,
                         BackwardScratch<Element>& scratch, int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                         const LayerGradientsQueued& layer_done = {}, const TensorParallelRun& tp = {});

// grad_wte (Vp, C) += grad_wte_head (Vp, C): the tied embedding's two gradient shares,
// added once per step in this fixed order, so every split of the model gives the same sum. A rank
// of tp tensor-parallel ranks adds its (Vp / tp, C) slices.
template <typename Element>
void sum_tied_embedding_gradient(const GPTConfig& config, Element* grad_wte, const Element* grad_wte_head,
                                 cudaStream_t stream, int tp = 1);

// The sum of acts.losses over the B T positions of the last forward with targets, on the host in
// double in row order (deterministic); masked positions (kIgnoredTarget) add 0. A step's loss with
// padding is the sum over its microbatches divided by its real tokens. Waits for stream.
template <typename Element>
double loss_sum(const Activations<Element>& acts, int B, int T, cudaStream_t stream);
// loss_sum / (B T): the mean when no position is masked.
template <typename Element>
double mean_loss(const Activations<Element>& acts, int B, int T, cudaStream_t stream);
// loss_sum / divisor added to *loss_sum (1, device) on the stream, without waiting: with divisor
// B T bitwise the value mean_loss returns, added in double; with divisor 1 the sum itself (a step
// with padding divides its total by its real tokens, kernels/classifier.cuh).
template <typename Element>
void add_mean_loss(const Activations<Element>& acts, int B, int T, double divisor, double* loss_sum,
                   cudaStream_t stream);
