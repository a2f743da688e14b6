// The vocabulary-parallel token embedding's kernels: each tensor-parallel rank holds rows
// [first, first + rows) of the tied wte (its slice of the padded vocabulary). The forward looks
// up the tokens its slice holds and writes zeros for the others, so that a sum over the tp ranks
// (model/vocab_parallel.h) is the whole embedding: each position has exactly one non-zero token
// row among the ranks, and x + 0 = x, so the sum is bitwise embedding_forward's for double and
// float. Megatron-LM's VocabParallelEmbedding masks and sums the same way. The backward is
// embedding_backward_rows (kernels/embedding.cuh). Instantiated for double, float and
// __nv_bfloat16 (bf16 storage, fp32 arithmetic).
#pragma once
#include <cuda_runtime.h>

// out (B, T, C) = (wte_rows[tokens[b, t] - first_token, :] if the token lies in [first_token,
// first_token + rows), else 0) + (wpe[t, :] if wpe is not null, else 0), written (=). tokens
// (B, T) on the device, wte_rows (rows, C), wpe (maxT, C) or nullptr, T <= maxT, B <= 65535. The
// caller adds the positions on one tp rank only (wpe nullptr on the others), so that the sum over
// the ranks holds them once.
template <typename Element>
void embedding_forward_rows(Element* out, const int* tokens, const Element* wte_rows, int first_token, int rows,
                            const Element* wpe, int B, int T, int C, cudaStream_t stream);
