// GPT-2's backward of a layer range split into I (input gradient) and W (parameter gradients),
// with the buffer W reads in between (model/gpt.cuh). Each function runs gpt_backward's kernels
// on the same values in the same order, I the input-gradient half, W the parameter-gradient half;
// only where a value lives differs (I writes W's operands into WeightGradientInputs instead of
// the shared scratch, and copies the saved activations and residual-stream gradients W needs).
// With tp > 1 the linear layers are the halves of their tensor-parallel backwards
// (model/tensor_parallel_linear.h): the column-parallel input gradients' all-reduces run in I,
// W communicates nothing. With sequence parallelism I is
// model/gpt_split_backward_sequence_parallel.cu's, and W adds the LayerNorms' gradients I summed.
#include <stdexcept>
#include <string>

#include "kernels/attention.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "model/gpt.cuh"
#include "model/gpt_internal.cuh"
#include "model/tensor_parallel_shard.h"
#include "model/vocab_parallel.h"

using namespace gpt_internal;

namespace {

template <typename X>
void copy(X* destination, const X* source, size_t count, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(destination, source, count * sizeof(X), cudaMemcpyDeviceToDevice, stream));
}

template <typename Element>
void check_weight_inputs(const LayerRange& range, const WeightGradientInputs<Element>& w, int B, int T,
                         const std::string& where) {
  if (!same_range(range, w.range) || B > w.B || T > w.T)
    throw std::runtime_error(where + ": the weight-gradient inputs were made for another range or a smaller (B, T)");
}

template <typename Element>
void check_scratch(const LayerRange& range, const BackwardScratch<Element>& scratch, int B, int T,
                   const std::string& where) {
  if (!same_range(range, scratch.range) || B > scratch.B || T > scratch.T)
    throw std::runtime_error(where + ": the backward scratch was made for another range or a smaller (B, T)");
}

}  // namespace

template <typename Element>
WeightGradientInputs<Element> weight_gradient_inputs_at(void* memory, const GPTConfig& config, int B, int T,
                                                        const LayerRange& range, int tp, bool sequence_parallel) {
  validate_layer_range(config, range);
  sequence_shards(T, tp, sequence_parallel);
  using Real = Compute<Element>;
  const size_t BT = size_t(B) * T, C = config.channels;
  const LocalSizes local = local_sizes(config, tp);
  Carver carve(memory);
  WeightGradientInputs<Element> w{};
  w.memory = memory;
  w.range = range;
  w.B = B;
  w.T = T;
  w.tp = tp;
  w.sequence_parallel = sequence_parallel;
  if (range.has_embedding) {
    w.tokens = carve.take<int>(BT);
    w.dencoded = carve.take<Element>(BT * C);
  }
  // With sequence parallelism I computes the LayerNorms' gradients itself (their sum over tp is a
  // collective, W has none): W reads their sums, not the LayerNorms' inputs.
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    BlockWeightInputs<Element> b{};
    if (!sequence_parallel) {
      b.ln1_input = carve.take<Element>(BT * C);
      b.ln1_mean = carve.take<Real>(BT);
      b.ln1_rstd = carve.take<Real>(BT);
      b.dln1 = carve.take<Element>(BT * C);
    }
    b.ln1 = carve.take<Element>(BT * C);
    b.dqkv = carve.take<Element>(BT * 3 * local.C);
    b.attention_out = carve.take<Element>(BT * local.C);
    b.dresidual2 = carve.take<Element>(BT * C);
    if (!sequence_parallel) {
      b.residual2 = carve.take<Element>(BT * C);
      b.ln2_mean = carve.take<Real>(BT);
      b.ln2_rstd = carve.take<Real>(BT);
      b.dln2 = carve.take<Element>(BT * C);
    }
    b.ln2 = carve.take<Element>(BT * C);
    b.dfch = carve.take<Element>(BT * local.hidden);
    b.fch_gelu = carve.take<Element>(BT * local.hidden);
    b.dresidual3 = carve.take<Element>(BT * C);
    if (sequence_parallel) b.layernorm_sums = carve.take<Element>(4 * C);
    w.blocks.push_back(b);
  }
  if (range.has_head) {
    if (!sequence_parallel) {
      w.lnf_input = carve.take<Element>(BT * C);
      w.lnf_mean = carve.take<Real>(BT);
      w.lnf_rstd = carve.take<Real>(BT);
      w.dlnf = carve.take<Element>(BT * C);
    }
    w.lnf = carve.take<Element>(BT * C);
    w.dlogits = carve.take<Element>(BT * local.Vp);
    if (sequence_parallel) w.lnf_sums = carve.take<Element>(2 * C);
  }
  w.bytes = carve.bytes();
  return w;
}

template <typename Element>
size_t weight_gradient_input_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int tp,
                                   bool sequence_parallel) {
  return weight_gradient_inputs_at<Element>(nullptr, config, B, T, range, tp, sequence_parallel).bytes;
}

template <typename Element>
WeightGradientInputs<Element> create_weight_gradient_inputs(const GPTConfig& config, int B, int T,
                                                            const LayerRange& range, int tp, bool sequence_parallel) {
  return weight_gradient_inputs_at<Element>(
      device_alloc_bytes(weight_gradient_input_bytes<Element>(config, B, T, range, tp, sequence_parallel)), config, B,
      T, range, tp, sequence_parallel);
}

template <typename Element>
void destroy_weight_gradient_inputs(WeightGradientInputs<Element>& inputs) {
  device_free(inputs.memory);
  inputs = WeightGradientInputs<Element>{};
}

// gpt_backward's input-gradient half; the comments name the parameter gradient each value feeds.
template <typename Element>
void gpt_backward_input(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                        const Activations<Element>& acts, BackwardScratch<Element>& scratch, const int* tokens,
                        const Nullable<Element>* input, const Nullable<Element>* grad_output,
                        Nullable<Element>* grad_input, WeightGradientInputs<Element>& w, int B, int T,
                        cublasHandle_t cublas, cudaStream_t stream, const TensorParallelRun& tp) {
  check_call(config, range, params, acts, tokens, input, B, T, "gpt_backward_input");
  const std::string where = "gpt_backward_input: " + describe(range);
  check_scratch(range, scratch, B, T, where);
  check_weight_inputs(range, w, B, T, where);
  check_tensor_parallelism(acts.tp, tp, where, acts.sequence_parallel);
  check_tensor_parallelism(scratch.tp, tp, where, scratch.sequence_parallel);
  check_tensor_parallelism(w.tp, tp, where, w.sequence_parallel);
  if (!range.has_head && !grad_output) throw std::runtime_error(where + ": a range without the head needs grad_output");
  if (!range.has_embedding && !grad_input)
    throw std::runtime_error(where + ": a range without the embedding needs grad_input");
  if (tp.sequence_parallel)
    return gpt_backward_input_sequence_parallel(config, range, params, acts, scratch, tokens, input, grad_output,
                                                grad_input, w, B, T, cublas, stream, tp);
  const int C = config.channels, NH = config.num_heads, BT = B * T;
  const size_t btc = size_t(BT) * C;
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});
  const CommGroups& groups = layer_groups(tp);
  // The residual stream's gradient: on an embedding range it ends as the embedding's output
  // gradient, which W reads, so it runs in w.dencoded itself.
  Element* dresidual = range.has_embedding ? w.dencoded : grad_input;  // (B, T, C)

  if (range.has_head) {
    const LinearSlice head = head_slice(config, tp);
    const Element* x = head_input(acts, input);
    column_parallel_backward_input(groups, cublas, head, w.dlnf, acts.logits, params.wte, BT, stream);
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, btc * sizeof(Element), stream));
    layernorm_backward_input(dresidual, w.dlnf, x, params.lnfw, acts.lnf_mean, acts.lnf_rstd, BT, C, stream);
    copy(w.dlogits, acts.logits, size_t(BT) * head.local_out(), stream);  // wte's head share
    copy(w.lnf, acts.lnf, btc, stream);
    copy(w.lnf_input, x, btc, stream);  // lnfw, lnfb
    copy(w.lnf_mean, acts.lnf_mean, size_t(BT), stream);
    copy(w.lnf_rstd, acts.lnf_rstd, size_t(BT), stream);
  } else {
    copy(dresidual, grad_output, btc, stream);
  }

  for (int l = range.end_layer - 1; l >= range.first_layer; --l) {
    const LayerParameters<Element> p = layer_views(params, config, l);
    const BlockActivations<Element>& a = acts.blocks[l - range.first_layer];
    const BlockWeightInputs<Element>& b = w.blocks[l - range.first_layer];
    const Element* x = block_input(acts, input, l);
    const size_t hidden = size_t(BT) * s.fc.local_out();
    copy(b.dresidual3, dresidual, btc, stream);  // fcprojw, fcprojb
    row_parallel_backward_input(cublas, s.fcproj, b.dfch, dresidual, p.fcprojw, BT, stream);
    gelu_backward(b.dfch, a.fch, b.dfch, hidden, stream);  // fcw, fcb
    column_parallel_backward_input(groups, cublas, s.fc, b.dln2, b.dfch, p.fcw, BT, stream);  // ln2w, ln2b
    layernorm_backward_input(dresidual, b.dln2, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, BT, C, stream);
    copy(b.dresidual2, dresidual, btc, stream);  // attprojw, attprojb
    row_parallel_backward_input(cublas, s.attproj, scratch.dbtc, dresidual, p.attprojw, BT, stream);
    block_attention_backward(cublas, b.dqkv, scratch, scratch.dbtc, acts, a, B, T, C / tp.tp(), NH / tp.tp(), stream);
    column_parallel_backward_input(groups, cublas, s.qkv, b.dln1, b.dqkv, p.qkvw, BT, stream);  // qkvw, qkvb; ln1w, ln1b
    layernorm_backward_input(dresidual, b.dln1, x, p.ln1w, a.ln1_mean, a.ln1_rstd, BT, C, stream);
    copy(b.ln1_input, x, btc, stream);
    copy(b.ln1_mean, a.ln1_mean, size_t(BT), stream);
    copy(b.ln1_rstd, a.ln1_rstd, size_t(BT), stream);
    copy(b.ln1, a.ln1, btc, stream);
    copy(b.attention_out, a.attention_out, size_t(BT) * s.attproj.local_in(), stream);
    copy(b.residual2, a.residual2, btc, stream);
    copy(b.ln2_mean, a.ln2_mean, size_t(BT), stream);
    copy(b.ln2_rstd, a.ln2_rstd, size_t(BT), stream);
    copy(b.ln2, a.ln2, btc, stream);
    copy(b.fch_gelu, a.fch_gelu, hidden, stream);
  }

  if (range.has_embedding) copy(w.tokens, tokens, size_t(BT), stream);  // wte, wpe
}

// gpt_backward's parameter-gradient half, in its order.
template <typename Element>
void gpt_backward_weight(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& grads,
                         Nullable<Element>* grad_wte_head, const WeightGradientInputs<Element>& w,
                         BackwardScratch<Element>& scratch, int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                         const LayerGradientsQueued& layer_done, const TensorParallelRun& tp) {
  const std::string where = "gpt_backward_weight: " + describe(range);
  check_scratch(range, scratch, B, T, where);
  check_weight_inputs(range, w, B, T, where);
  check_tensor_parallelism(scratch.tp, tp, where, scratch.sequence_parallel);
  check_tensor_parallelism(w.tp, tp, where, w.sequence_parallel);
  if (grads.first_layer > range.first_layer)
    throw std::runtime_error(where + ": the gradient views start at layer " + std::to_string(grads.first_layer));
  if (range.has_head && !grad_wte_head) throw std::runtime_error(where + ": the head needs grad_wte_head");
  const int C = config.channels, BT = B * T;
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});

  if (range.has_head) {
    parallel_linear_backward_weight(cublas, head_slice(config, tp), grad_wte_head, static_cast<Element*>(nullptr),
                                    nullptr, w.dlogits, w.lnf, BT, stream);
    if (w.sequence_parallel)
      add_layernorm_sums(grads.lnfw, grads.lnfb, w.lnf_sums, C, stream);
    else
      layernorm_backward_weight(grads.lnfw, grads.lnfb, scratch.layernorm_weight, w.dlnf, w.lnf_input, w.lnf_mean,
                                w.lnf_rstd, BT, C, stream);
  }
  for (int l = range.end_layer - 1; l >= range.first_layer; --l) {
    const LayerParameters<Element> g = layer_views(grads, config, l);
    const BlockWeightInputs<Element>& b = w.blocks[l - range.first_layer];
    parallel_linear_backward_weight(cublas, s.fcproj, g.fcprojw, g.fcprojb, scratch.bias_gradient, b.dresidual3,
                                    b.fch_gelu, BT, stream);
    parallel_linear_backward_weight(cublas, s.fc, g.fcw, g.fcb, scratch.bias_gradient, b.dfch, b.ln2, BT, stream);
    if (w.sequence_parallel)
      add_layernorm_sums(g.ln2w, g.ln2b, b.layernorm_sums, C, stream);
    else
      layernorm_backward_weight(g.ln2w, g.ln2b, scratch.layernorm_weight, b.dln2, b.residual2, b.ln2_mean,
                                b.ln2_rstd, BT, C, stream);
    parallel_linear_backward_weight(cublas, s.attproj, g.attprojw, g.attprojb, scratch.bias_gradient, b.dresidual2,
                                    b.attention_out, BT, stream);
    parallel_linear_backward_weight(cublas, s.qkv, g.qkvw, g.qkvb, scratch.bias_gradient, b.dqkv, b.ln1, BT, stream);
    if (w.sequence_parallel)
      add_layernorm_sums(g.ln1w, g.ln1b, b.layernorm_sums + 2 * C, C, stream);
    else
      layernorm_backward_weight(g.ln1w, g.ln1b, scratch.layernorm_weight, b.dln1, b.ln1_input, b.ln1_mean,
                                b.ln1_rstd, BT, C, stream);
    if (layer_done) layer_done(l);
  }
  if (range.has_embedding && tp.tp() > 1)
    vocab_parallel_embedding_backward(layer_groups(tp), grads.wte, grads.wpe, scratch.embedding, w.dencoded, w.tokens,
                                      B, T, C, config.padded_vocab_size, stream);
  else if (range.has_embedding)
    embedding_backward(grads.wte, grads.wpe, scratch.embedding, w.dencoded, w.tokens, B, T, C, stream);
}

#define INSTANTIATE_GPT_SPLIT_BACKWARD(Element)                                                                     \
  template size_t weight_gradient_input_bytes<Element>(const GPTConfig&, int, int, const LayerRange&, int, bool);   \
  template WeightGradientInputs<Element> weight_gradient_inputs_at<Element>(void*, const GPTConfig&, int, int,      \
                                                                            const LayerRange&, int, bool);          \
  template WeightGradientInputs<Element> create_weight_gradient_inputs<Element>(const GPTConfig&, int, int,         \
                                                                                const LayerRange&, int, bool);      \
  template void destroy_weight_gradient_inputs<Element>(WeightGradientInputs<Element>&);                            \
  template void gpt_backward_input<Element>(const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&,   \
                                            const Activations<Element>&, BackwardScratch<Element>&, const int*,      \
                                            const Element*, const Element*, Element*, WeightGradientInputs<Element>&, \
                                            int, int, cublasHandle_t, cudaStream_t, const TensorParallelRun&);       \
  template void gpt_backward_weight<Element>(const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&,  \
                                             Element*, const WeightGradientInputs<Element>&,                         \
                                             BackwardScratch<Element>&, int, int, cublasHandle_t, cudaStream_t,       \
                                             const LayerGradientsQueued&, const TensorParallelRun&);

INSTANTIATE_GPT_SPLIT_BACKWARD(double)
INSTANTIATE_GPT_SPLIT_BACKWARD(float)
INSTANTIATE_GPT_SPLIT_BACKWARD(__nv_bfloat16)
