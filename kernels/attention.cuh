// Causal multi-head self-attention: from the fused q, k, v projection (B, T, 3C) to the
// heads' outputs (B, T, C), and back. NH heads of HS = C / NH channels; in the qkv
// buffer each of q, k, v is C wide and holds the heads one after another, as llm.c.
// The products run on cuBLAS (host pointer mode; the handle is bound to the given
// stream), the head permutations and the softmax are our kernels. Instantiated for
// double, float and __nv_bfloat16 (bf16 storage, fp32 arithmetic). Buffers are the
// caller's; sizes below count elements of the element type.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

// The forward's saved state: q, k, v permuted per head, (3, B, NH, T, HS), then the
// attention probabilities (B, NH, T, T): 3 B T C + B NH T T elements.
size_t attention_saved_size(int B, int T, int C, int NH);
// Scratch of the forward: the heads' outputs before they are interleaved back, B T C elements.
size_t attention_forward_scratch_size(int B, int T, int C, int NH);
// Scratch of the backward: the permuted q, k, v gradients and the probability gradients,
// 3 B T C + B NH T T elements.
size_t attention_backward_scratch_size(int B, int T, int C, int NH);

// out (B, T, C) = for each head, softmax(q k^T / sqrt(HS), causal) v, from inp (B, T, 3C)
// holding q, k, v. Written (=). Fills saved (attention_saved_size elements) for the
// backward; uses scratch (attention_forward_scratch_size elements). Requires C % NH == 0.
template <typename Element>
void attention_forward(cublasHandle_t cublas, Element* out, Element* saved, Element* scratch, const Element* inp,
                       int B, int T, int C, int NH, cudaStream_t stream);

// dinp (B, T, 3C) = the gradient of the forward's inputs q, k, v, from dout (B, T, C) and
// the forward's saved state. Written (=). Uses scratch (attention_backward_scratch_size elements).
template <typename Element>
void attention_backward(cublasHandle_t cublas, Element* dinp, Element* scratch, const Element* dout,
                        const Element* saved, int B, int T, int C, int NH, cudaStream_t stream);
