// LayerNorm over the C channels of each row: out = (x - mean) * rstd * weight + bias,
// rstd = 1 / sqrt(var + 1e-5), as GPT-2. The forward (also fused with the residual add
// before it) saves mean and rstd per row; the backward is split into the input gradient
// and the parameter gradients, launchable separately. Instantiated for double, float and
// __nv_bfloat16 (bf16 storage; arithmetic and the saved statistics in fp32). Buffers are
// the caller's; N = B * T rows, any C >= 1.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/element.cuh"

// out (N, C) = layernorm of inp (N, C) with weight (C), bias (C). Written (=). Saves
// mean (N) and rstd (N), in Compute<Element>, for the backward.
template <typename Element>
void layernorm_forward(Element* out, Compute<Element>* mean, Compute<Element>* rstd, const Element* inp,
                       const Element* weight, const Element* bias, size_t N, int C, cudaStream_t stream);

// residual_out (N, C) = a (N, C) + b (N, C), then out (N, C) = layernorm of residual_out
// (as rounded to Element) with weight (C), bias (C). Both written (=). Saves mean (N) and
// rstd (N) in Compute<Element>; the backward is layernorm_backward_* with inp = residual_out.
template <typename Element>
void residual_layernorm_forward(Element* residual_out, Element* out, Compute<Element>* mean, Compute<Element>* rstd,
                                const Element* a, const Element* b, const Element* weight, const Element* bias,
                                size_t N, int C, cudaStream_t stream);

// dinp (N, C) += the gradient of the forward's input, from dout (N, C), inp (N, C), weight
// (C) and the saved mean (N) and rstd (N). Accumulated (+=): dinp is the residual stream's
// gradient, to which the LayerNorm branch adds.
template <typename Element>
void layernorm_backward_input(Element* dinp, const Element* dout, const Element* inp, const Element* weight,
                              const Compute<Element>* mean, const Compute<Element>* rstd, size_t N, int C,
                              cudaStream_t stream);

// Workspace of layernorm_backward_weight, in Compute<Element> elements: 2 C per group of
// 128 rows (the per-group partial sums of both gradients).
size_t layernorm_backward_weight_workspace_size(size_t N, int C);

// dweight (C) += sum over rows of dout * (inp - mean) * rstd, dbias (C) += sum over rows
// of dout, from dout (N, C), inp (N, C) and the saved mean (N) and rstd (N). Accumulated
// (+=). Rows are summed in a fixed order (within groups of 128 rows, then over groups),
// so the result is bitwise reproducible. Uses workspace
// (layernorm_backward_weight_workspace_size elements).
template <typename Element>
void layernorm_backward_weight(Element* dweight, Element* dbias, Compute<Element>* workspace, const Element* dout,
                               const Element* inp, const Compute<Element>* mean, const Compute<Element>* rstd,
                               size_t N, int C, cudaStream_t stream);
