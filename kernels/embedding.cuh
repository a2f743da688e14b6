// Token and position embedding of GPT-2: out[b, t, :] = wte[token[b, t]] + wpe[t], and
// its gradients. The backward is deterministic without float atomics: positions are
// ordered by (token, position) on the device and each token's run of positions is
// summed in position order. Instantiated for double, float and __nv_bfloat16 (bf16
// storage, fp32 arithmetic). Buffers are the caller's; tokens must lie in [0, Vp).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

// out (B, T, C) = wte[tokens[b, t], :] + wpe[t, :], with tokens (B, T) on the device,
// wte (Vp, C) and wpe (maxT, C), T <= maxT. Written (=). Saves nothing: the backward
// reads the tokens.
template <typename Element>
void embedding_forward(Element* out, const int* tokens, const Element* wte, const Element* wpe, int B, int T, int C,
                       cudaStream_t stream);

// Workspace of embedding_backward: B T ints (the positions ordered by token).
size_t embedding_backward_workspace_size(int B, int T);

// dwte (Vp, C) += for each token v, the sum of dout[b, t, :] over the positions with
// tokens[b, t] == v, in position order; dwpe (maxT, C) += for t < T, the sum over b of
// dout[b, t, :] in order of b. Accumulated (+=); bitwise reproducible whatever the
// thread scheduling. Uses workspace (embedding_backward_workspace_size ints).
template <typename Element>
void embedding_backward(Element* dwte, Element* dwpe, int* workspace, const Element* dout, const int* tokens, int B,
                        int T, int C, cudaStream_t stream);
