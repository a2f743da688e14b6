// gpt_forward and gpt_backward with sequence parallelism (model/gpt.cuh; issue 33 item 4, Korthikanti
// et al. 2022). The residual stream, the LayerNorms and their saved statistics hold the rank's
// shard of the B T token rows, rows [r B T / tp, (r + 1) B T / tp) on tp rank r; the attention and
// the MLP's hidden layer hold every row of the rank's heads and hidden channels, as without it.
//
//   embedding: each rank's rows of its vocabulary slice (zeros for the other tokens, wpe on tp rank
//     0), reduce-scattered: the rank's shard of the embedding, bitwise the all-reduce's rows.
//   block: LayerNorm 1 on the shard -> all-gather -> QKV (column) -> attention -> projection (row)
//     -> reduce-scatter -> + bias, residual and LayerNorm 2 on the shard -> all-gather -> fc1 ->
//     GELU -> fc2 (row) -> reduce-scatter -> + bias, residual.
//   head: the final LayerNorm on the shard -> all-gather -> the vocabulary-parallel logits and loss
//     on all B T rows, as without sequence parallelism (the loss needs every row's three reductions
//     anyway, and the losses stay the same on every tp rank).
//
// The backward swaps the collectives: the residual stream's gradient shard is gathered before
// each row-parallel layer's backward, and each column-parallel input gradient reduce-scattered.
// Each LayerNorm's saved output is the shard; the backward gathers it again for its
// column-parallel layer's weight gradient (as Megatron does), so a slot holds 1 / tp of it.
//
// The LayerNorms' parameter gradients are where sequence parallelism changes a sum: each rank
// sees only its rows, so its gradient is partial. Each block's four (ln1, ln2: weight and bias) are
// computed into scratch.layernorm_partials, all-reduced over tp in one call right after the block's
// backward (before layer_done, so the data-parallel sum reads summed gradients), then added (+=) to
// grads: every tp rank adds the same sum, so the replicated LayerNorms stay bitwise equal and the
// norm counts them once, as without sequence parallelism. lnf the same, on its own. Summed per
// microbatch, not once a step: an all-reduce of gradients accumulated over microbatches would
// count the earlier microbatches tp times.
#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/classifier.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/residual.cuh"
#include "kernels/vocab_parallel_embedding.cuh"
#include "model/gpt.cuh"
#include "model/gpt_internal.cuh"
#include "model/parameters_pending.h"
#include "model/sequence_parallel_linear.h"
#include "model/tensor_parallel_shard.h"
#include "model/vocab_parallel.h"

namespace gpt_internal {

namespace {

// dweight (C) += the tp ranks' summed partials[0, C), dbias (C) += partials[C, 2C), for each of
// count (weight, bias) pairs.
template <typename Element>
void add_layernorm_gradients_summed_over_tp(const CommGroups& groups, Element* partials, Element* const* dweights,
                                            Element* const* dbiases, int count, int C, cudaStream_t stream) {
  allreduce_tensor_parallel(groups, partials, size_t(2 * count) * C, nccl_data_type<Element>(), ncclSum, stream);
  for (int i = 0; i < count; ++i) add_layernorm_sums(dweights[i], dbiases[i], partials + size_t(2 * i) * C, C, stream);
}

}  // namespace

template <typename Element>
void add_layernorm_sums(Element* dweight, Element* dbias, const Element* sums, int C, cudaStream_t stream) {
  residual_backward(dweight, sums, C, stream);
  residual_backward(dbias, sums + C, C, stream);
}

template <typename Element>
void gpt_forward_sequence_parallel(const GPTConfig& config, const LayerRange& range,
                                   const ParameterTensors<Element>& params, Activations<Element>& acts,
                                   const int* tokens, const Element* input, const int* targets, double loss_scale,
                                   int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                                   const TensorParallelRun& tp) {
  const int C = config.channels, NH = config.num_heads, BT = B * T, Vp = config.padded_vocab_size;
  const int rows = BT / sequence_shards(T, tp.tp(), true);
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});
  const CommGroups& groups = *tp.groups;
  if (range.has_embedding) {
    wait_for_parameters(params.pending, -1, stream);
    const VocabularySlice slice = vocabulary_slice(groups.mesh, Vp);
    embedding_forward_rows(acts.gathered, tokens, params.wte, slice.first, slice.columns,
                           tp.rank() == 0 ? params.wpe : nullptr, B, T, C, stream);
    reduce_scatter_tensor_parallel(groups, acts.gathered, acts.encoded, size_t(rows) * C, nccl_data_type<Element>(),
                                   stream);
  }
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    wait_for_parameters(params.pending, l, stream);
    const LayerParameters<Element> p = layer_views(params, config, l);
    const BlockActivations<Element>& a = acts.blocks[l - range.first_layer];
    const Element* x = block_input(acts, input, l);  // (rows, C)
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, rows, C, stream);
    gather_sequence(groups, a.ln1, acts.gathered, BT, C, stream);
    column_parallel_forward(cublas, s.qkv, block_qkv(acts, a), acts.gathered, p.qkvw, p.qkvb, BT, stream);
    block_attention_forward(cublas, acts, a, B, T, C / tp.tp(), NH / tp.tp(), stream);
    const Element* projection = row_parallel_forward_scattered(groups, cublas, s.attproj, acts.projection,
                                                               a.attention_out, p.attprojw, p.attprojb, BT, stream);
    residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x, projection, p.ln2w, p.ln2b, rows, C,
                               stream);
    gather_sequence(groups, a.ln2, acts.gathered, BT, C, stream);
    column_parallel_forward(cublas, s.fc, a.fch, acts.gathered, p.fcw, p.fcb, BT, stream);
    gelu_forward(a.fch_gelu, a.fch, size_t(BT) * s.fc.local_out(), stream);
    projection = row_parallel_forward_scattered(groups, cublas, s.fcproj, acts.projection, a.fch_gelu, p.fcprojw,
                                                p.fcprojb, BT, stream);
    residual_forward(a.residual3, a.residual2, projection, size_t(rows) * C, stream);
  }
  if (!range.has_head) return;
  wait_for_parameters(params.pending, config.num_layers, stream);
  layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, head_input(acts, input), params.lnfw, params.lnfb, rows,
                    C, stream);
  gather_sequence(groups, acts.lnf, acts.gathered, BT, C, stream);
  column_parallel_forward(cublas, head_slice(config, tp), acts.logits, acts.gathered, params.wte,
                          static_cast<const Element*>(nullptr), BT, stream);
  if (!targets) return;
  reset_bad_target_row(acts.bad_target_row, stream);
  vocab_parallel_cross_entropy(groups, acts.logits, acts.losses, acts.row_stats, targets, Compute<Element>(loss_scale),
                               acts.bad_target_row, BT, config.vocab_size, Vp, stream);
}

template <typename Element>
void gpt_backward_sequence_parallel(const GPTConfig& config, const LayerRange& range,
                                    const ParameterTensors<Element>& params, const ParameterTensors<Element>& grads,
                                    Element* grad_wte_head, const Activations<Element>& acts,
                                    BackwardScratch<Element>& scratch, const int* tokens, const Element* input,
                                    const Element* grad_output, Element* grad_input, int B, int T,
                                    cublasHandle_t cublas, cudaStream_t stream, const LayerGradientsQueued& layer_done,
                                    const TensorParallelRun& tp) {
  const int C = config.channels, NH = config.num_heads, BT = B * T;
  const int rows = BT / sequence_shards(T, tp.tp(), true);
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});
  const CommGroups& groups = *tp.groups;
  Element* dresidual = range.has_embedding ? scratch.dresidual : grad_input;  // (rows, C): the rank's shard
  Element* dbtc = scratch.dbtc;  // (rows, C) a LayerNorm output's gradient, or (B T, C / tp) the attention output's
  Element* gathered_gradient = scratch.gathered_gradient;  // (B T, C)
  Element* gathered_input = scratch.gathered_input;        // (B T, C)
  Element* partials = scratch.layernorm_partials;          // (4 C)
  const size_t partial_bytes = 4 * size_t(C) * sizeof(Element);

  if (range.has_head) {
    const Element* x = head_input(acts, input);
    gather_sequence(groups, acts.lnf, gathered_input, BT, C, stream);
    column_parallel_backward_scattered(groups, cublas, head_slice(config, tp), dbtc, gathered_gradient, grad_wte_head,
                                       static_cast<Element*>(nullptr), nullptr, acts.logits, gathered_input,
                                       params.wte, BT, tp.overlap, stream);
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, size_t(rows) * C * sizeof(Element), stream));
    layernorm_backward_input(dresidual, dbtc, x, params.lnfw, acts.lnf_mean, acts.lnf_rstd, rows, C, stream);
    CUDA_CHECK(cudaMemsetAsync(partials, 0, partial_bytes, stream));
    layernorm_backward_weight(partials, partials + C, scratch.layernorm_weight, dbtc, x, acts.lnf_mean, acts.lnf_rstd,
                              rows, C, stream);
    Element* const dweight[] = {grads.lnfw};
    Element* const dbias[] = {grads.lnfb};
    add_layernorm_gradients_summed_over_tp(groups, partials, dweight, dbias, 1, C, stream);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(dresidual, grad_output, size_t(rows) * C * sizeof(Element), cudaMemcpyDeviceToDevice,
                               stream));
  }

  for (int l = range.end_layer - 1; l >= range.first_layer; --l) {
    const LayerParameters<Element> p = layer_views(params, config, l);
    const LayerParameters<Element> g = layer_views(grads, config, l);
    const BlockActivations<Element>& a = acts.blocks[l - range.first_layer];
    const Element* x = block_input(acts, input, l);
    CUDA_CHECK(cudaMemsetAsync(partials, 0, partial_bytes, stream));
    // MLP: fc2's output gradient is the residual stream's, gathered.
    gather_sequence(groups, dresidual, gathered_gradient, BT, C, stream);
    row_parallel_backward(cublas, s.fcproj, scratch.dfch, g.fcprojw, g.fcprojb, scratch.bias_gradient,
                          gathered_gradient, a.fch_gelu, p.fcprojw, BT, stream);
    gelu_backward(scratch.dfch, a.fch, scratch.dfch, size_t(BT) * s.fc.local_out(), stream);
    gather_sequence(groups, a.ln2, gathered_input, BT, C, stream);
    column_parallel_backward_scattered(groups, cublas, s.fc, dbtc, gathered_gradient, g.fcw, g.fcb,
                                       scratch.bias_gradient, scratch.dfch, gathered_input, p.fcw, BT, tp.overlap,
                                       stream);
    layernorm_backward_input(dresidual, dbtc, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, rows, C, stream);
    layernorm_backward_weight(partials, partials + C, scratch.layernorm_weight, dbtc, a.residual2, a.ln2_mean,
                              a.ln2_rstd, rows, C, stream);
    // Attention: the projection's output gradient is the residual stream's, gathered.
    gather_sequence(groups, dresidual, gathered_gradient, BT, C, stream);
    row_parallel_backward(cublas, s.attproj, dbtc, g.attprojw, g.attprojb, scratch.bias_gradient, gathered_gradient,
                          a.attention_out, p.attprojw, BT, stream);
    block_attention_backward(cublas, scratch.dqkv, scratch, dbtc, acts, a, B, T, C / tp.tp(), NH / tp.tp(), stream);
    gather_sequence(groups, a.ln1, gathered_input, BT, C, stream);
    column_parallel_backward_scattered(groups, cublas, s.qkv, dbtc, gathered_gradient, g.qkvw, g.qkvb,
                                       scratch.bias_gradient, scratch.dqkv, gathered_input, p.qkvw, BT, tp.overlap,
                                       stream);
    layernorm_backward_input(dresidual, dbtc, x, p.ln1w, a.ln1_mean, a.ln1_rstd, rows, C, stream);
    layernorm_backward_weight(partials + 2 * C, partials + 3 * C, scratch.layernorm_weight, dbtc, x, a.ln1_mean,
                              a.ln1_rstd, rows, C, stream);
    Element* const dweights[] = {g.ln2w, g.ln1w};
    Element* const dbiases[] = {g.ln2b, g.ln1b};
    add_layernorm_gradients_summed_over_tp(groups, partials, dweights, dbiases, 2, C, stream);
    if (layer_done) layer_done(l);
  }

  if (range.has_embedding) {
    gather_sequence(groups, dresidual, gathered_gradient, BT, C, stream);
    vocab_parallel_embedding_backward(groups, grads.wte, grads.wpe, scratch.embedding, gathered_gradient, tokens, B, T,
                                      C, config.padded_vocab_size, stream);
  }
}

#define INSTANTIATE_GPT_SEQUENCE_PARALLEL(Element)                                                                   \
  template void add_layernorm_sums<Element>(Element*, Element*, const Element*, int, cudaStream_t);                 \
  template void gpt_forward_sequence_parallel<Element>(                                                               \
      const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&, Activations<Element>&, const int*,      \
      const Element*, const int*, double, int, int, cublasHandle_t, cudaStream_t, const TensorParallelRun&);        \
  template void gpt_backward_sequence_parallel<Element>(                                                              \
      const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&, const ParameterTensors<Element>&,      \
      Element*, const Activations<Element>&, BackwardScratch<Element>&, const int*, const Element*, const Element*, \
      Element*, int, int, cublasHandle_t, cudaStream_t, const LayerGradientsQueued&, const TensorParallelRun&);
INSTANTIATE_GPT_SEQUENCE_PARALLEL(double)
INSTANTIATE_GPT_SEQUENCE_PARALLEL(float)
INSTANTIATE_GPT_SEQUENCE_PARALLEL(__nv_bfloat16)

}  // namespace gpt_internal
