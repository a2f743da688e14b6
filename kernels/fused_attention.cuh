// Fused causal multi-head self-attention (FlashAttention-2's algorithm, Dao 2023): the function of
// kernels/attention.cuh, from the fused q, k, v projection (B, T, 3C) to the heads' outputs
// (B, T, C), computed in tiles of queries and keys in shared memory without any (T, T) matrix.
// The forward keeps one log-sum-exp per row; the backward recomputes the probabilities from it.
// Heads of HS = C / NH channels, HS a multiple of 16 up to 128 (GPT-2's 64 among them); any other
// shape throws std::runtime_error naming it. Any T. Instantiated for double, float and
// __nv_bfloat16 (bf16 storage, fp32 arithmetic). Deterministic: no atomics, every sum in an
// order fixed by the shape. Buffers are the caller's; the sizes below count Compute<Element>
// values (double for double, float otherwise).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/element.cuh"

// Whether the kernels take heads of HS = C / NH channels (a multiple of 16 up to 128).
bool fused_attention_takes_heads(int C, int NH);

// Saved by the forward for the backward: the log-sum-exp of each row's scaled logits,
// (B, NH, T): B NH T values, where the materialised attention saves B NH T T probabilities.
// The backward also reads the forward's input and output, which the caller keeps anyway.
size_t fused_attention_saved_size(int B, int T, int NH);
// Scratch of the backward: D = rowsum(dout * out) for each (B, NH, T) row, B NH T values.
size_t fused_attention_backward_scratch_size(int B, int T, int NH);

// out (B, T, C) = for each head, softmax(q k^T / sqrt(HS), causal) v, from inp (B, T, 3C)
// holding q, k, v. Written (=). Writes lse (fused_attention_saved_size values) for the backward.
template <typename Element>
void fused_attention_forward(Element* out, Compute<Element>* lse, const Element* inp, int B, int T, int C, int NH,
                             cudaStream_t stream);

// dinp (B, T, 3C) = the gradient of the forward's inputs q, k, v, from dout (B, T, C), the
// forward's input inp and output out, and its lse. Written (=). Uses scratch
// (fused_attention_backward_scratch_size values).
template <typename Element>
void fused_attention_backward(Element* dinp, Compute<Element>* scratch, const Element* dout, const Element* inp,
                              const Element* out, const Compute<Element>* lse, int B, int T, int C, int NH,
                              cudaStream_t stream);
