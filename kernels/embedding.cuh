// Token and position embedding of GPT-2: out[b, t, :] = wte[token[b, t]] + wpe[t], and
// its gradients. The backward is deterministic without float atomics: the (token,
// position) pairs are sorted on the device and each token's positions are summed in a
// fixed order (below). Instantiated for double, float and __nv_bfloat16 (bf16 storage,
// fp32 arithmetic). Buffers are the caller's; tokens must lie in [0, Vp).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

// out (B, T, C) = wte[tokens[b, t], :] + wpe[t, :], with tokens (B, T) on the device,
// wte (Vp, C) and wpe (maxT, C), T <= maxT, B <= 65535. Written (=). Saves nothing: the
// backward reads the tokens.
template <typename Element>
void embedding_forward(Element* out, const int* tokens, const Element* wte, const Element* wpe, int B, int T, int C,
                       cudaStream_t stream);

// The positions of a token summed in one chain: its longer runs are cut into segments of
// this many (see embedding_backward).
constexpr int kEmbeddingSegment = 256;

// Workspace of embedding_backward, in ints: two arrays of B T 64-bit keys for the sort,
// then the sums of the segments of long runs, 2 ceil(B T / kEmbeddingSegment) rows of C
// (sized for double, the widest accumulator).
size_t embedding_backward_workspace_size(int B, int T, int C);

// dwte (Vp, C) += for each token v, the sum of dout[b, t, :] over the r positions with
// tokens[b, t] == v, in a fixed order: with the positions in order p_0 < p_1 < ..., and
// L = kEmbeddingSegment, the sum is ((0 + dout[p_0]) + dout[p_1]) + ... when r <= L, as a
// serial loop would add; for r > L, the same sum over each segment of L positions
// (p_0 to p_{L-1}, p_L to p_{2L-1}, ...), then the segments' sums added in order. That
// total is added to dwte once. dwpe (maxT, C) += for t < T, the sum over b of
// dout[b, t, :] in order of b. Accumulated (+=); bitwise reproducible whatever the thread
// scheduling. Uses workspace (embedding_backward_workspace_size ints).
template <typename Element>
void embedding_backward(Element* dwte, Element* dwpe, int* workspace, const Element* dout, const int* tokens, int B,
                        int T, int C, cudaStream_t stream);

// embedding_backward for the rows [first_token, first_token + rows) of wte alone, a
// tensor-parallel rank's slice: dwte_rows (rows, C) is the gradient of row first_token onward,
// and positions whose token lies outside add nothing to it. Each row held gets bitwise what
// embedding_backward adds to it (the same sort and sums); dwpe as embedding_backward.
template <typename Element>
void embedding_backward_rows(Element* dwte_rows, int first_token, int rows, Element* dwpe, int* workspace,
                             const Element* dout, const int* tokens, int B, int T, int C, cudaStream_t stream);
