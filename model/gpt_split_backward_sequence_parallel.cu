// The split backward's I (gpt_backward_input, model/gpt.cuh) with sequence parallelism: the
// zero-bubble schedules and DualPipeV with --sequence-parallel (issue 33). It runs
// gpt_backward_sequence_parallel's kernels and collectives on the same values in the same order,
// less the linear layers' weight gradients, which W computes from what I leaves in the
// WeightGradientInputs:
//
//   - the row-parallel layers' output gradients, the residual stream's gradient gathered over tp
//     (B T rows: I gathers them for its own input gradient anyway);
//   - the column-parallel layers' inputs, the LayerNorms' output shards gathered over tp. Kept, not
//     gathered again in W: W stays free of collectives (the schedules run it where no other rank
//     waits, and a pair's W on the second stream would need a place in the rank's NCCL order),
//     at 2 B T C elements a block (ln1 and ln2 gathered) where a re-gather would keep their shards,
//     2 B T C / tp; the pool holds 4 C + 12 C / tp elements a token a block, against tp alone's
//     8 C + 12 C / tp + 4 (model/gpt_split_backward.cu);
//   - the LayerNorms' parameter gradients themselves, summed over tp: each rank's sum over its
//     rows, all-reduced once per block and microbatch here in I (as the fused backward does it
//     after each block), so W only adds the sums (+=), as every tp rank adds them.
//
// The embedding's output gradient is gathered into w.dencoded at the end, for W's
// vocabulary-parallel embedding backward on all B T rows.
#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/cuda_check.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "model/gpt.cuh"
#include "model/gpt_internal.cuh"
#include "model/sequence_parallel_linear.h"
#include "model/tensor_parallel_shard.h"

namespace gpt_internal {

namespace {

template <typename X>
void copy(X* destination, const X* source, size_t count, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(destination, source, count * sizeof(X), cudaMemcpyDeviceToDevice, stream));
}

template <typename Element>
void sum_over_tp(const CommGroups& groups, Element* sums, size_t count, cudaStream_t stream) {
  allreduce_tensor_parallel(groups, sums, count, nccl_data_type<Element>(), ncclSum, stream);
}

}  // namespace

template <typename Element>
void gpt_backward_input_sequence_parallel(const GPTConfig& config, const LayerRange& range,
                                          const ParameterTensors<Element>& params, const Activations<Element>& acts,
                                          BackwardScratch<Element>& scratch, const int* tokens, const Element* input,
                                          const Element* grad_output, Element* grad_input,
                                          WeightGradientInputs<Element>& w, int B, int T, cublasHandle_t cublas,
                                          cudaStream_t stream, const TensorParallelRun& tp) {
  const int C = config.channels, NH = config.num_heads, BT = B * T;
  const int rows = BT / sequence_shards(T, tp.tp(), true);
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});
  const CommGroups& groups = *tp.groups;
  Element* dresidual = range.has_embedding ? scratch.dresidual : grad_input;  // (rows, C): the rank's shard
  Element* dbtc = scratch.dbtc;  // (rows, C) a LayerNorm output's gradient, or (B T, C / tp) the attention output's
  Element* partial = scratch.gathered_gradient;  // (B T, C) a column-parallel layer's partial input gradient

  if (range.has_head) {
    const Element* x = head_input(acts, input);
    gather_sequence(groups, acts.lnf, w.lnf, BT, C, stream);  // wte's head share
    column_parallel_backward_input_scattered(groups, cublas, head_slice(config, tp), dbtc, partial, acts.logits,
                                             params.wte, BT, stream);
    copy(w.dlogits, acts.logits, size_t(BT) * head_slice(config, tp).local_out(), stream);
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, size_t(rows) * C * sizeof(Element), stream));
    layernorm_backward_input(dresidual, dbtc, x, params.lnfw, acts.lnf_mean, acts.lnf_rstd, rows, C, stream);
    CUDA_CHECK(cudaMemsetAsync(w.lnf_sums, 0, 2 * size_t(C) * sizeof(Element), stream));
    layernorm_backward_weight(w.lnf_sums, w.lnf_sums + C, scratch.layernorm_weight, dbtc, x, acts.lnf_mean,
                              acts.lnf_rstd, rows, C, stream);
    sum_over_tp(groups, w.lnf_sums, 2 * size_t(C), stream);  // lnfw, lnfb
  } else {
    copy(dresidual, grad_output, size_t(rows) * C, stream);
  }

  for (int l = range.end_layer - 1; l >= range.first_layer; --l) {
    const LayerParameters<Element> p = layer_views(params, config, l);
    const BlockActivations<Element>& a = acts.blocks[l - range.first_layer];
    const BlockWeightInputs<Element>& b = w.blocks[l - range.first_layer];
    const Element* x = block_input(acts, input, l);
    const size_t hidden = size_t(BT) * s.fc.local_out();
    CUDA_CHECK(cudaMemsetAsync(b.layernorm_sums, 0, 4 * size_t(C) * sizeof(Element), stream));
    // MLP: fc2's output gradient is the residual stream's, gathered.
    gather_sequence(groups, dresidual, b.dresidual3, BT, C, stream);  // fcprojw, fcprojb
    row_parallel_backward_input(cublas, s.fcproj, b.dfch, b.dresidual3, p.fcprojw, BT, stream);
    gelu_backward(b.dfch, a.fch, b.dfch, hidden, stream);  // fcw, fcb
    gather_sequence(groups, a.ln2, b.ln2, BT, C, stream);  // fcw
    column_parallel_backward_input_scattered(groups, cublas, s.fc, dbtc, partial, b.dfch, p.fcw, BT, stream);
    layernorm_backward_input(dresidual, dbtc, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, rows, C, stream);
    layernorm_backward_weight(b.layernorm_sums, b.layernorm_sums + C, scratch.layernorm_weight, dbtc, a.residual2,
                              a.ln2_mean, a.ln2_rstd, rows, C, stream);
    // Attention: the projection's output gradient is the residual stream's, gathered.
    gather_sequence(groups, dresidual, b.dresidual2, BT, C, stream);  // attprojw, attprojb
    row_parallel_backward_input(cublas, s.attproj, dbtc, b.dresidual2, p.attprojw, BT, stream);
    block_attention_backward(cublas, b.dqkv, scratch, dbtc, acts, a, B, T, C / tp.tp(), NH / tp.tp(), stream);
    gather_sequence(groups, a.ln1, b.ln1, BT, C, stream);  // qkvw, qkvb
    column_parallel_backward_input_scattered(groups, cublas, s.qkv, dbtc, partial, b.dqkv, p.qkvw, BT, stream);
    layernorm_backward_input(dresidual, dbtc, x, p.ln1w, a.ln1_mean, a.ln1_rstd, rows, C, stream);
    layernorm_backward_weight(b.layernorm_sums + 2 * C, b.layernorm_sums + 3 * C, scratch.layernorm_weight, dbtc, x,
                              a.ln1_mean, a.ln1_rstd, rows, C, stream);
    sum_over_tp(groups, b.layernorm_sums, 4 * size_t(C), stream);  // ln2w, ln2b, ln1w, ln1b
    copy(b.attention_out, a.attention_out, size_t(BT) * s.attproj.local_in(), stream);
    copy(b.fch_gelu, a.fch_gelu, hidden, stream);
  }

  if (range.has_embedding) {
    gather_sequence(groups, dresidual, w.dencoded, BT, C, stream);  // wte, wpe
    copy(w.tokens, tokens, size_t(BT), stream);
  }
}

#define INSTANTIATE_GPT_SPLIT_BACKWARD_SEQUENCE_PARALLEL(Element)                                                   \
  template void gpt_backward_input_sequence_parallel<Element>(                                                      \
      const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&, const Activations<Element>&,           \
      BackwardScratch<Element>&, const int*, const Element*, const Element*, Element*, WeightGradientInputs<Element>&, \
      int, int, cublasHandle_t, cudaStream_t, const TensorParallelRun&);
INSTANTIATE_GPT_SPLIT_BACKWARD_SEQUENCE_PARALLEL(double)
INSTANTIATE_GPT_SPLIT_BACKWARD_SEQUENCE_PARALLEL(float)
INSTANTIATE_GPT_SPLIT_BACKWARD_SEQUENCE_PARALLEL(__nv_bfloat16)

}  // namespace gpt_internal
