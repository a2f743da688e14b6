// GPT-2's backward of a layer range split into I (input gradient) and W (parameter gradients),
// with the buffer W reads in between (model/gpt.cuh). Each function runs gpt_backward's kernels
// on the same values in the same order, I the input-gradient half, W the parameter-gradient half;
// only where a value lives differs (I writes W's operands into WeightGradientInputs instead of
// the shared scratch, and copies the saved activations and residual-stream gradients W needs).
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

// The split backward runs the whole tensors only (issue 33: its tensor-parallel I and W are to come).
void check_not_tensor_parallel(int tp, const std::string& where) {
  if (tp != 1)
    throw std::runtime_error(where + ": the split backward (zero-bubble I and W) does not run tensor-parallel yet " +
                             "(buffers made for tp " + std::to_string(tp) + ")");
}

}  // namespace

template <typename Element>
WeightGradientInputs<Element> weight_gradient_inputs_at(void* memory, const GPTConfig& config, int B, int T,
                                                           const LayerRange& range) {
  validate_layer_range(config, range);
  using Real = Compute<Element>;
  const size_t BT = size_t(B) * T, C = config.channels;
  Carver carve(memory);
  WeightGradientInputs<Element> w{};
  w.memory = memory;
  w.range = range;
  w.B = B;
  w.T = T;
  if (range.has_embedding) {
    w.tokens = carve.take<int>(BT);
    w.dencoded = carve.take<Element>(BT * C);
  }
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    BlockWeightInputs<Element> b;
    b.ln1_input = carve.take<Element>(BT * C);
    b.ln1_mean = carve.take<Real>(BT);
    b.ln1_rstd = carve.take<Real>(BT);
    b.dln1 = carve.take<Element>(BT * C);
    b.ln1 = carve.take<Element>(BT * C);
    b.dqkv = carve.take<Element>(BT * 3 * C);
    b.attention_out = carve.take<Element>(BT * C);
    b.dresidual2 = carve.take<Element>(BT * C);
    b.residual2 = carve.take<Element>(BT * C);
    b.ln2_mean = carve.take<Real>(BT);
    b.ln2_rstd = carve.take<Real>(BT);
    b.dln2 = carve.take<Element>(BT * C);
    b.ln2 = carve.take<Element>(BT * C);
    b.dfch = carve.take<Element>(BT * 4 * C);
    b.fch_gelu = carve.take<Element>(BT * 4 * C);
    b.dresidual3 = carve.take<Element>(BT * C);
    w.blocks.push_back(b);
  }
  if (range.has_head) {
    w.lnf_input = carve.take<Element>(BT * C);
    w.lnf_mean = carve.take<Real>(BT);
    w.lnf_rstd = carve.take<Real>(BT);
    w.dlnf = carve.take<Element>(BT * C);
    w.lnf = carve.take<Element>(BT * C);
    w.dlogits = carve.take<Element>(BT * config.padded_vocab_size);
  }
  w.bytes = carve.bytes();
  return w;
}

template <typename Element>
size_t weight_gradient_input_bytes(const GPTConfig& config, int B, int T, const LayerRange& range) {
  return weight_gradient_inputs_at<Element>(nullptr, config, B, T, range).bytes;
}

template <typename Element>
WeightGradientInputs<Element> create_weight_gradient_inputs(const GPTConfig& config, int B, int T,
                                                            const LayerRange& range) {
  return weight_gradient_inputs_at<Element>(
      device_alloc_bytes(weight_gradient_input_bytes<Element>(config, B, T, range)), config, B, T, range);
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
                        cublasHandle_t cublas, cudaStream_t stream) {
  check_call(config, range, params, acts, tokens, input, B, T, "gpt_backward_input");
  const std::string where = "gpt_backward_input: " + describe(range);
  check_scratch(range, scratch, B, T, where);
  check_not_tensor_parallel(acts.tp, where);
  check_weight_inputs(range, w, B, T, where);
  if (!range.has_head && !grad_output) throw std::runtime_error(where + ": a range without the head needs grad_output");
  if (!range.has_embedding && !grad_input)
    throw std::runtime_error(where + ": a range without the embedding needs grad_input");
  const int C = config.channels, NH = config.num_heads, BT = B * T;
  const size_t btc = size_t(BT) * C;
  // The residual stream's gradient: on an embedding range it ends as the embedding's output
  // gradient, which W reads, so it runs in w.dencoded itself.
  Element* dresidual = range.has_embedding ? w.dencoded : grad_input;  // (B, T, C)

  if (range.has_head) {
    const int Vp = config.padded_vocab_size;
    const Element* x = head_input(acts, input);
    matmul_backward_input(cublas, w.dlnf, acts.logits, params.wte, BT, C, Vp, stream);
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, btc * sizeof(Element), stream));
    layernorm_backward_input(dresidual, w.dlnf, x, params.lnfw, acts.lnf_mean, acts.lnf_rstd, BT, C, stream);
    copy(w.dlogits, acts.logits, size_t(BT) * Vp, stream);  // wte's head share
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
    const size_t hidden = size_t(BT) * 4 * C;
    copy(b.dresidual3, dresidual, btc, stream);  // fcprojw, fcprojb
    matmul_backward_input(cublas, b.dfch, dresidual, p.fcprojw, BT, 4 * C, C, stream);
    gelu_backward(b.dfch, a.fch, b.dfch, hidden, stream);             // fcw, fcb
    matmul_backward_input(cublas, b.dln2, b.dfch, p.fcw, BT, C, 4 * C, stream);  // ln2w, ln2b
    layernorm_backward_input(dresidual, b.dln2, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, BT, C, stream);
    copy(b.dresidual2, dresidual, btc, stream);  // attprojw, attprojb
    matmul_backward_input(cublas, scratch.dbtc, dresidual, p.attprojw, BT, C, C, stream);
    block_attention_backward(cublas, b.dqkv, scratch, scratch.dbtc, acts, a, B, T, C, NH, stream);
    matmul_backward_input(cublas, b.dln1, b.dqkv, p.qkvw, BT, C, 3 * C, stream);  // qkvw, qkvb; ln1w, ln1b
    layernorm_backward_input(dresidual, b.dln1, x, p.ln1w, a.ln1_mean, a.ln1_rstd, BT, C, stream);
    copy(b.ln1_input, x, btc, stream);
    copy(b.ln1_mean, a.ln1_mean, size_t(BT), stream);
    copy(b.ln1_rstd, a.ln1_rstd, size_t(BT), stream);
    copy(b.ln1, a.ln1, btc, stream);
    copy(b.attention_out, a.attention_out, btc, stream);
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
                         const LayerGradientsQueued& layer_done) {
  const std::string where = "gpt_backward_weight: " + describe(range);
  check_scratch(range, scratch, B, T, where);
  check_not_tensor_parallel(scratch.tp, where);
  check_weight_inputs(range, w, B, T, where);
  if (grads.first_layer > range.first_layer)
    throw std::runtime_error(where + ": the gradient views start at layer " + std::to_string(grads.first_layer));
  if (range.has_head && !grad_wte_head) throw std::runtime_error(where + ": the head needs grad_wte_head");
  const int C = config.channels, BT = B * T;

  if (range.has_head) {
    matmul_backward_weight(cublas, grad_wte_head, static_cast<Element*>(nullptr), nullptr, w.dlogits, w.lnf, BT, C,
                           config.padded_vocab_size, stream);
    layernorm_backward_weight(grads.lnfw, grads.lnfb, scratch.layernorm_weight, w.dlnf, w.lnf_input, w.lnf_mean,
                              w.lnf_rstd, BT, C, stream);
  }
  for (int l = range.end_layer - 1; l >= range.first_layer; --l) {
    const LayerParameters<Element> g = layer_views(grads, config, l);
    const BlockWeightInputs<Element>& b = w.blocks[l - range.first_layer];
    matmul_backward_weight(cublas, g.fcprojw, g.fcprojb, scratch.bias_gradient, b.dresidual3, b.fch_gelu, BT, 4 * C,
                           C, stream);
    matmul_backward_weight(cublas, g.fcw, g.fcb, scratch.bias_gradient, b.dfch, b.ln2, BT, C, 4 * C, stream);
    layernorm_backward_weight(g.ln2w, g.ln2b, scratch.layernorm_weight, b.dln2, b.residual2, b.ln2_mean, b.ln2_rstd,
                              BT, C, stream);
    matmul_backward_weight(cublas, g.attprojw, g.attprojb, scratch.bias_gradient, b.dresidual2, b.attention_out, BT,
                           C, C, stream);
    matmul_backward_weight(cublas, g.qkvw, g.qkvb, scratch.bias_gradient, b.dqkv, b.ln1, BT, C, 3 * C, stream);
    layernorm_backward_weight(g.ln1w, g.ln1b, scratch.layernorm_weight, b.dln1, b.ln1_input, b.ln1_mean, b.ln1_rstd,
                              BT, C, stream);
    if (layer_done) layer_done(l);
  }
  if (range.has_embedding)
    embedding_backward(grads.wte, grads.wpe, scratch.embedding, w.dencoded, w.tokens, B, T, C, stream);
}

#define INSTANTIATE_GPT_SPLIT_BACKWARD(Element)                                                                     \
  template size_t weight_gradient_input_bytes<Element>(const GPTConfig&, int, int, const LayerRange&);              \
  template WeightGradientInputs<Element> weight_gradient_inputs_at<Element>(void*, const GPTConfig&, int, int,      \
                                                                            const LayerRange&);                     \
  template WeightGradientInputs<Element> create_weight_gradient_inputs<Element>(const GPTConfig&, int, int,         \
                                                                                const LayerRange&);                 \
  template void destroy_weight_gradient_inputs<Element>(WeightGradientInputs<Element>&);                            \
  template void gpt_backward_input<Element>(const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&,   \
                                            const Activations<Element>&, BackwardScratch<Element>&, const int*,      \
                                            const Element*, const Element*, Element*, WeightGradientInputs<Element>&, \
                                            int, int, cublasHandle_t, cudaStream_t);                                 \
  template void gpt_backward_weight<Element>(const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&,  \
                                             Element*, const WeightGradientInputs<Element>&,                         \
                                             BackwardScratch<Element>&, int, int, cublasHandle_t, cudaStream_t,       \
                                             const LayerGradientsQueued&);

INSTANTIATE_GPT_SPLIT_BACKWARD(double)
INSTANTIATE_GPT_SPLIT_BACKWARD(float)
INSTANTIATE_GPT_SPLIT_BACKWARD(__nv_bfloat16)
