// GPT-2's forward and backward for a layer range (see model/gpt.cuh): the activation and
// scratch layouts, then the forward, the backward, and the helpers around them.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/attention.cuh"
#include "kernels/fused_attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"
#include "comm/mesh.h"
#include "model/gpt.cuh"
#include "model/gpt_internal.cuh"
#include "model/parameters_pending.h"
#include "model/tensor_parallel_shard.h"
#include "model/vocab_parallel.h"

using namespace gpt_internal;

namespace {

template <typename Element>
Activations<Element> point_activations(void* memory, const GPTConfig& config, int B, int T, const LayerRange& range,
                                       int tp, AttentionKind attention, bool sequence_parallel) {
  validate_layer_range(config, range);
  using Real = Compute<Element>;
  const size_t BT = size_t(B) * T, C = config.channels;
  const LocalSizes local = local_sizes(config, tp);
  const size_t rows = BT / sequence_shards(T, tp, sequence_parallel);  // the residual stream's token rows
  Carver carve(memory);
  Activations<Element> acts{};
  acts.memory = memory;
  acts.range = range;
  acts.B = B;
  acts.T = T;
  acts.tp = tp;
  acts.sequence_parallel = sequence_parallel;
  acts.attention_kind = attention;
  const bool fused = attention == AttentionKind::fused;
  if (range.has_embedding) acts.encoded = carve.take<Element>(rows * C);
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    BlockActivations<Element> block;
    block.ln1 = carve.take<Element>(rows * C);
    block.ln1_mean = carve.take<Real>(rows);
    block.ln1_rstd = carve.take<Real>(rows);
    if (fused) {
      block.qkv = carve.take<Element>(BT * 3 * local.C);
      block.lse = carve.take<Real>(fused_attention_saved_size(B, T, local.NH));
    } else {
      block.attention_saved = carve.take<Element>(attention_saved_size(B, T, local.C, local.NH));
    }
    block.attention_out = carve.take<Element>(BT * local.C);
    block.residual2 = carve.take<Element>(rows * C);
    block.ln2 = carve.take<Element>(rows * C);
    block.ln2_mean = carve.take<Real>(rows);
    block.ln2_rstd = carve.take<Real>(rows);
    block.fch = carve.take<Element>(BT * local.hidden);
    block.fch_gelu = carve.take<Element>(BT * local.hidden);
    block.residual3 = carve.take<Element>(rows * C);
    acts.blocks.push_back(block);
  }
  if (range.end_layer > range.first_layer) {
    if (fused) {
      acts.projection = carve.take<Element>(BT * C);
    } else {
      acts.qkv = carve.take<Element>(BT * 3 * local.C);
      acts.projection =
          carve.take<Element>(std::max(BT * C, attention_forward_scratch_size(B, T, local.C, local.NH)));
    }
  }
  if (sequence_parallel) acts.gathered = carve.take<Element>(BT * C);
  if (range.has_head) {
    acts.lnf = carve.take<Element>(rows * C);
    acts.lnf_mean = carve.take<Real>(rows);
    acts.lnf_rstd = carve.take<Real>(rows);
    acts.logits = carve.take<Element>(BT * local.Vp);
    acts.losses = carve.take<Real>(BT);
    acts.bad_target_row = carve.take<int>(1);
    if (tp > 1) acts.row_stats = carve.take<Real>(3 * BT);
  }
  acts.bytes = carve.bytes();
  return acts;
}

template <typename Element>
BackwardScratch<Element> point_backward_scratch(void* memory, const GPTConfig& config, int B, int T,
                                                const LayerRange& range, int tp, AttentionKind attention,
                                                bool sequence_parallel) {
  validate_layer_range(config, range);
  const size_t BT = size_t(B) * T, C = config.channels;
  const LocalSizes local = local_sizes(config, tp);
  sequence_shards(T, tp, sequence_parallel);
  Carver carve(memory);
  BackwardScratch<Element> scratch{};
  scratch.memory = memory;
  scratch.range = range;
  scratch.B = B;
  scratch.T = T;
  scratch.tp = tp;
  scratch.sequence_parallel = sequence_parallel;
  scratch.attention_kind = attention;
  scratch.dbtc = carve.take<Element>(BT * C);
  scratch.layernorm_weight = carve.take<Compute<Element>>(layernorm_backward_weight_workspace_size(BT, C));
  if (range.end_layer > range.first_layer) {
    scratch.dqkv = carve.take<Element>(BT * 3 * local.C);
    scratch.dfch = carve.take<Element>(BT * local.hidden);
    // 4C: at least any bias a rank holds (3C / tp, C, 4C / tp).
    scratch.bias_gradient = carve.take<Compute<Element>>(matmul_bias_gradient_workspace_size(BT, 4 * C));
    if (attention == AttentionKind::fused)
      scratch.fused_attention =
          carve.take<Compute<Element>>(fused_attention_backward_scratch_size(B, T, int(local.NH)));
    else
      scratch.attention = carve.take<Element>(attention_backward_scratch_size(B, T, local.C, local.NH));
  }
  if (range.has_embedding) {
    scratch.dresidual = carve.take<Element>(BT * C);
    scratch.embedding = carve.take<int>(embedding_backward_workspace_size(B, T, C));
  }
  if (sequence_parallel) {
    scratch.gathered_gradient = carve.take<Element>(BT * C);
    scratch.gathered_input = carve.take<Element>(BT * C);
    scratch.layernorm_partials = carve.take<Element>(4 * C);
  }
  scratch.bytes = carve.bytes();
  return scratch;
}

}  // namespace

LayerRange whole_model(const GPTConfig& config) { return {0, config.num_layers, true, true}; }

void validate_layer_range(const GPTConfig& config, const LayerRange& range) {
  if (range.first_layer < 0 || range.end_layer > config.num_layers || range.end_layer < range.first_layer)
    throw std::runtime_error(describe(range) + " is not within the model's " + std::to_string(config.num_layers) +
                             " layers");
  if (range.first_layer == range.end_layer && !range.has_embedding && !range.has_head)
    throw std::runtime_error(describe(range) + " has no blocks, no embedding and no head: it computes nothing");
}

template <typename Element>
size_t activation_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int tp,
                        AttentionKind attention, bool sequence_parallel) {
  return point_activations<Element>(nullptr, config, B, T, range, tp, attention, sequence_parallel).bytes;
}

template <typename Element>
size_t stage_input_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int sequence_shards) {
  const size_t BT = size_t(B) * T;
  return range.has_embedding ? BT * sizeof(int) : BT / sequence_shards * config.channels * sizeof(Element);
}

template <typename Element>
Activations<Element> create_activations(const GPTConfig& config, int B, int T, const LayerRange& range, int tp,
                                        AttentionKind attention, bool sequence_parallel) {
  return point_activations<Element>(
      device_alloc_bytes(activation_bytes<Element>(config, B, T, range, tp, attention, sequence_parallel)), config, B,
      T, range, tp, attention, sequence_parallel);
}

template <typename Element>
void destroy_activations(Activations<Element>& acts) {
  device_free(acts.memory);
  acts = Activations<Element>{};
}

template <typename Element>
size_t backward_scratch_bytes(const GPTConfig& config, int B, int T, const LayerRange& range, int tp,
                              AttentionKind attention, bool sequence_parallel) {
  return point_backward_scratch<Element>(nullptr, config, B, T, range, tp, attention, sequence_parallel).bytes;
}

template <typename Element>
BackwardScratch<Element> create_backward_scratch(const GPTConfig& config, int B, int T, const LayerRange& range,
                                                 int tp, AttentionKind attention, bool sequence_parallel) {
  return point_backward_scratch<Element>(
      device_alloc_bytes(backward_scratch_bytes<Element>(config, B, T, range, tp, attention, sequence_parallel)),
      config, B, T, range, tp, attention, sequence_parallel);
}

template <typename Element>
void destroy_backward_scratch(BackwardScratch<Element>& scratch) {
  device_free(scratch.memory);
  scratch = BackwardScratch<Element>{};
}

template <typename Element>
const Element* range_output(const Activations<Element>& acts) {
  return acts.blocks.empty() ? acts.encoded : acts.blocks.back().residual3;
}

// Each block is pre-LayerNorm GPT-2: x -> residual2 = x + attproj(attention(qkv(ln1(x))))
// -> residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))). The block's output residual3
// is always stored unfused (not fused into the next LayerNorm), so that a block computes the
// same operations whether the next block is on this stage or the next: splits are bitwise free.
// With tp > 1 the embedding, the linear layers and the loss are their tensor-parallel forms; with
// tp = 1 each of them is today's kernel call (model/tensor_parallel_linear.h).
template <typename Element>
void gpt_forward(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                 Activations<Element>& acts, const int* tokens, const Nullable<Element>* input, const int* targets,
                 double loss_scale, int B, int T, cublasHandle_t cublas, cudaStream_t stream,
                 const TensorParallelRun& tp) {
  check_call(config, range, params, acts, tokens, input, B, T, "gpt_forward");
  check_tensor_parallelism(acts.tp, tp, "gpt_forward: " + describe(range), acts.sequence_parallel);
  if (tp.sequence_parallel)
    return gpt_forward_sequence_parallel(config, range, params, acts, tokens, input, targets, loss_scale, B, T, cublas,
                                         stream, tp);
  const int C = config.channels, NH = config.num_heads, BT = B * T, Vp = config.padded_vocab_size;
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});
  const CommGroups& groups = layer_groups(tp);
  if (range.has_embedding) {
    wait_for_parameters(params.pending, -1, stream);
    if (tp.tp() > 1)
      vocab_parallel_embedding_forward(groups, acts.encoded, tokens, params.wte, params.wpe, B, T, C, Vp, stream);
    else
      embedding_forward(acts.encoded, tokens, params.wte, params.wpe, B, T, C, stream);
  }
  for (int l = range.first_layer; l < range.end_layer; ++l) {
    wait_for_parameters(params.pending, l, stream);
    const LayerParameters<Element> p = layer_views(params, config, l);
    const BlockActivations<Element>& a = acts.blocks[l - range.first_layer];
    const Element* x = block_input(acts, input, l);  // (B, T, C)
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, BT, C, stream);
    column_parallel_forward(cublas, s.qkv, block_qkv(acts, a), a.ln1, p.qkvw, p.qkvb, BT, stream);
    block_attention_forward(cublas, acts, a, B, T, C / tp.tp(), NH / tp.tp(), stream);
    row_parallel_forward(groups, cublas, s.attproj, acts.projection, a.attention_out, p.attprojw, p.attprojb, BT,
                         stream);
    residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x, acts.projection, p.ln2w, p.ln2b, BT, C,
                               stream);
    column_parallel_forward(cublas, s.fc, a.fch, a.ln2, p.fcw, p.fcb, BT, stream);
    gelu_forward(a.fch_gelu, a.fch, size_t(BT) * s.fc.local_out(), stream);
    row_parallel_forward(groups, cublas, s.fcproj, acts.projection, a.fch_gelu, p.fcprojw, p.fcprojb, BT, stream);
    residual_forward(a.residual3, a.residual2, acts.projection, size_t(BT) * C, stream);
  }
  if (!range.has_head) return;
  const int V = config.vocab_size;
  wait_for_parameters(params.pending, config.num_layers, stream);
  layernorm_forward(acts.lnf, acts.lnf_mean, acts.lnf_rstd, head_input(acts, input), params.lnfw, params.lnfb, BT, C,
                    stream);
  column_parallel_forward(cublas, head_slice(config, tp), acts.logits, acts.lnf, params.wte,
                          static_cast<const Element*>(nullptr), BT, stream);
  if (!targets) return;
  reset_bad_target_row(acts.bad_target_row, stream);
  if (tp.tp() > 1)
    vocab_parallel_cross_entropy(groups, acts.logits, acts.losses, acts.row_stats, targets,
                                 Compute<Element>(loss_scale), acts.bad_target_row, BT, V, Vp, stream);
  else
    classifier_forward_backward(acts.logits, acts.losses, targets, Compute<Element>(loss_scale), acts.bad_target_row,
                                BT, V, Vp, stream);
}

// The residual stream's gradient (dresidual) runs from the range's output to its input:
// each block's branches add their input gradients to it (+=, layernorm_backward_input),
// and the residual additions themselves pass it through unchanged.
template <typename Element>
void gpt_backward(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                  const ParameterTensors<Element>& grads, Nullable<Element>* grad_wte_head,
                  const Activations<Element>& acts, BackwardScratch<Element>& scratch, const int* tokens,
                  const Nullable<Element>* input, const Nullable<Element>* grad_output, Nullable<Element>* grad_input,
                  int B, int T, cublasHandle_t cublas, cudaStream_t stream, const LayerGradientsQueued& layer_done,
                  const TensorParallelRun& tp) {
  check_call(config, range, params, acts, tokens, input, B, T, "gpt_backward");
  const std::string where = "gpt_backward: " + describe(range);
  check_tensor_parallelism(acts.tp, tp, where, acts.sequence_parallel);
  check_tensor_parallelism(scratch.tp, tp, where, scratch.sequence_parallel);
  if (!same_range(range, scratch.range) || B > scratch.B || T > scratch.T)
    throw std::runtime_error(where + ": the backward scratch was made for another range or a smaller (B, T)");
  if (!range.has_head && !grad_output) throw std::runtime_error(where + ": a range without the head needs grad_output");
  if (range.has_head && !grad_wte_head) throw std::runtime_error(where + ": the head needs grad_wte_head");
  if (!range.has_embedding && !grad_input)
    throw std::runtime_error(where + ": a range without the embedding needs grad_input");
  if (tp.sequence_parallel)
    return gpt_backward_sequence_parallel(config, range, params, grads, grad_wte_head, acts, scratch, tokens, input,
                                          grad_output, grad_input, B, T, cublas, stream, layer_done, tp);
  const int C = config.channels, NH = config.num_heads, BT = B * T;
  const size_t btc_bytes = size_t(BT) * C * sizeof(Element);
  const BlockSlices s = block_slices(config, {tp.tp(), tp.rank()});
  const CommGroups& groups = layer_groups(tp);
  Element* dresidual = range.has_embedding ? scratch.dresidual : grad_input;  // (B, T, C)
  Element* dbtc = scratch.dbtc;                                               // (B, T, C)

  if (range.has_head) {
    const Element* x = head_input(acts, input);
    column_parallel_backward(groups, cublas, head_slice(config, tp), dbtc, grad_wte_head,
                             static_cast<Element*>(nullptr), nullptr, acts.logits, acts.lnf, params.wte, BT,
                             tp.overlap, stream);
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, btc_bytes, stream));
    layernorm_backward_input(dresidual, dbtc, x, params.lnfw, acts.lnf_mean, acts.lnf_rstd, BT, C, stream);
    layernorm_backward_weight(grads.lnfw, grads.lnfb, scratch.layernorm_weight, dbtc, x, acts.lnf_mean, acts.lnf_rstd,
                              BT, C, stream);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(dresidual, grad_output, btc_bytes, cudaMemcpyDeviceToDevice, stream));
  }

  for (int l = range.end_layer - 1; l >= range.first_layer; --l) {
    const LayerParameters<Element> p = layer_views(params, config, l);
    const LayerParameters<Element> g = layer_views(grads, config, l);
    const BlockActivations<Element>& a = acts.blocks[l - range.first_layer];
    const Element* x = block_input(acts, input, l);
    const size_t hidden = size_t(BT) * s.fc.local_out();
    // MLP: residual3 = residual2 + fcproj(...), so fcproj's output gradient is dresidual.
    row_parallel_backward(cublas, s.fcproj, scratch.dfch, g.fcprojw, g.fcprojb, scratch.bias_gradient, dresidual,
                          a.fch_gelu, p.fcprojw, BT, stream);
    gelu_backward(scratch.dfch, a.fch, scratch.dfch, hidden, stream);
    column_parallel_backward(groups, cublas, s.fc, dbtc, g.fcw, g.fcb, scratch.bias_gradient, scratch.dfch, a.ln2,
                             p.fcw, BT, tp.overlap, stream);
    layernorm_backward_input(dresidual, dbtc, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, BT, C, stream);
    layernorm_backward_weight(g.ln2w, g.ln2b, scratch.layernorm_weight, dbtc, a.residual2, a.ln2_mean, a.ln2_rstd, BT,
                              C, stream);
    // Attention: residual2 = x + attproj(...), so attproj's output gradient is dresidual.
    row_parallel_backward(cublas, s.attproj, dbtc, g.attprojw, g.attprojb, scratch.bias_gradient, dresidual,
                          a.attention_out, p.attprojw, BT, stream);
    block_attention_backward(cublas, scratch.dqkv, scratch, dbtc, acts, a, B, T, C / tp.tp(), NH / tp.tp(), stream);
    column_parallel_backward(groups, cublas, s.qkv, dbtc, g.qkvw, g.qkvb, scratch.bias_gradient, scratch.dqkv, a.ln1,
                             p.qkvw, BT, tp.overlap, stream);
    layernorm_backward_input(dresidual, dbtc, x, p.ln1w, a.ln1_mean, a.ln1_rstd, BT, C, stream);
    layernorm_backward_weight(g.ln1w, g.ln1b, scratch.layernorm_weight, dbtc, x, a.ln1_mean, a.ln1_rstd, BT, C, stream);
    if (layer_done) layer_done(l);
  }

  if (range.has_embedding && tp.tp() > 1)
    vocab_parallel_embedding_backward(groups, grads.wte, grads.wpe, scratch.embedding, dresidual, tokens, B, T, C,
                                      config.padded_vocab_size, stream);
  else if (range.has_embedding)
    embedding_backward(grads.wte, grads.wpe, scratch.embedding, dresidual, tokens, B, T, C, stream);
}

template <typename Element>
void sum_tied_embedding_gradient(const GPTConfig& config, Element* grad_wte, const Element* grad_wte_head,
                                 cudaStream_t stream, int tp) {
  residual_backward(grad_wte, grad_wte_head, size_t(config.padded_vocab_size / tp) * config.channels, stream);
}

template <typename Element>
double loss_sum(const Activations<Element>& acts, int B, int T, cudaStream_t stream) {
  const size_t BT = size_t(B) * T;
  std::vector<Compute<Element>> losses(BT);
  CUDA_CHECK(
      cudaMemcpyAsync(losses.data(), acts.losses, BT * sizeof(Compute<Element>), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double sum = 0.0;
  for (const Compute<Element> loss : losses) sum += double(loss);
  return sum;
}

template <typename Element>
double mean_loss(const Activations<Element>& acts, int B, int T, cudaStream_t stream) {
  return loss_sum(acts, B, T, stream) / double(size_t(B) * T);
}

template <typename Element>
void add_mean_loss(const Activations<Element>& acts, int B, int T, double divisor, double* loss_sum,
                   cudaStream_t stream) {
  add_mean_loss(loss_sum, acts.losses, size_t(B) * T, divisor, stream);
}

#define INSTANTIATE_GPT(Element)                                                                                       \
  template size_t activation_bytes<Element>(const GPTConfig&, int, int, const LayerRange&, int, AttentionKind, bool);  \
  template size_t stage_input_bytes<Element>(const GPTConfig&, int, int, const LayerRange&, int);                      \
  template Activations<Element> create_activations<Element>(const GPTConfig&, int, int, const LayerRange&, int,        \
                                                            AttentionKind, bool);                                      \
  template void destroy_activations<Element>(Activations<Element>&);                                                   \
  template size_t backward_scratch_bytes<Element>(const GPTConfig&, int, int, const LayerRange&, int, AttentionKind,   \
                                                   bool);                                                              \
  template BackwardScratch<Element> create_backward_scratch<Element>(const GPTConfig&, int, int, const LayerRange&,    \
                                                                     int, AttentionKind, bool);                        \
  template void destroy_backward_scratch<Element>(BackwardScratch<Element>&);                                          \
  template const Element* range_output<Element>(const Activations<Element>&);                                          \
  template void gpt_forward<Element>(const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&,            \
                                     Activations<Element>&, const int*, const Element*, const int*, double, int, int,  \
                                     cublasHandle_t, cudaStream_t, const TensorParallelRun&);                          \
  template void gpt_backward<Element>(const GPTConfig&, const LayerRange&, const ParameterTensors<Element>&,           \
                                      const ParameterTensors<Element>&, Element*, const Activations<Element>&,         \
                                      BackwardScratch<Element>&, const int*, const Element*, const Element*, Element*, \
                                      int, int, cublasHandle_t, cudaStream_t, const LayerGradientsQueued&,             \
                                      const TensorParallelRun&);                                                       \
  template void sum_tied_embedding_gradient<Element>(const GPTConfig&, Element*, const Element*, cudaStream_t, int);   \
  template double loss_sum<Element>(const Activations<Element>&, int, int, cudaStream_t);                              \
  template double mean_loss<Element>(const Activations<Element>&, int, int, cudaStream_t);                             \
  template void add_mean_loss<Element>(const Activations<Element>&, int, int, double, double*, cudaStream_t);

INSTANTIATE_GPT(double)
INSTANTIATE_GPT(float)
INSTANTIATE_GPT(__nv_bfloat16)
