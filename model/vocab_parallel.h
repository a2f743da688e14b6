// The vocabulary-parallel token embedding and cross-entropy of a tensor-parallel stage, with the
// tied wte cut into tp slices of rows (issue 33; Megatron-LM's VocabParallelEmbedding and
// vocab_parallel_cross_entropy). Each tp rank holds rows [first, first + Vp / tp) of wte, which
// are also its columns of the logits (the output projection uses the tied wte). The kernels are
// kernels/vocab_parallel_*; the sums over the tp ranks go through comm/tensor_parallel.h on the
// communicator the caller gives. Nothing is allocated: the caller owns every buffer. With tp = 1
// the slice is the whole vocabulary and no communication happens.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "comm/groups.h"
#include "kernels/element.cuh"
#include "kernels/vocab_parallel_cross_entropy.cuh"

// This rank's slice of the padded vocabulary: rows [tp_rank Vp / tp, (tp_rank + 1) Vp / tp) of
// wte (tp divides Vp: check_tensor_parallel_sizes, comm/mesh.h).
VocabularySlice vocabulary_slice(const Mesh& mesh, int padded_vocab);

// out (B, T, C) = wte[tokens[b, t]] + wpe[t] on every tp rank (=), from this rank's wte_slice
// (Vp / tp, C) and the replicated wpe (maxT, C): each rank writes its own tokens' rows and zeros
// for the others, tp rank 0 adds the positions, then one all-reduce sum of B T C elements over the
// tp ranks. Each element has one token row and one position row among the summands and zeros
// elsewhere, so for double and float out is bitwise embedding_forward's (but for the sign of a
// zero sum).
template <typename Element>
void vocab_parallel_embedding_forward(const CommGroups& groups, Element* out, const int* tokens,
                                      const Element* wte_slice, const Element* wpe, int B, int T, int C,
                                      int padded_vocab, cudaStream_t stream);

// The backward, without communication: dout (B, T, C) is the same on every tp rank (the
// gradient of the replicated embedding), and each rank adds (+=) to dwte_slice (Vp / tp, C) the
// gradient of the rows it holds, bitwise what embedding_backward adds to them. dwpe (maxT, C) +=
// the position gradient on every tp rank: the same dout through the same deterministic kernel, so
// the replicas of wpe get bitwise equal gradients and stay equal (the norm must count them once).
// workspace: embedding_backward_workspace_size(B, T, C) ints.
template <typename Element>
void vocab_parallel_embedding_backward(const CommGroups& groups, Element* dwte_slice, Element* dwpe, int* workspace,
                                       const Element* dout, const int* tokens, int B, int T, int C, int padded_vocab,
                                       cudaStream_t stream);

// Softmax cross-entropy over the whole vocabulary from this rank's logits_slice (BT, Vp / tp),
// never gathering the logits: losses[row] (BT) = -log softmax(logits[row, :V])[target] (=) on
// every tp rank, and logits_slice overwritten (=) by dloss (softmax - one-hot) on its vocabulary
// columns, 0 on the padding (V..Vp-1), as classifier_forward_backward does for the whole row. Three
// reductions of BT values over the tp ranks: the rows' maximum logit (ncclMax), then the sums of
// exp(logit - max) and the target's logit (one ncclSum of 2 BT). row_stats: a workspace of 3 BT
// Compute<Element>. Bad targets as the fused classifier's (*bad_target_row on every rank).
template <typename Element>
void vocab_parallel_cross_entropy(const CommGroups& groups, Element* logits_slice, Compute<Element>* losses,
                                  Compute<Element>* row_stats, const int* targets, Compute<Element> dloss,
                                  int* bad_target_row, size_t BT, int V, int padded_vocab, cudaStream_t stream);
