// The vocabulary-parallel cross-entropy's kernels: each tensor-parallel rank holds the logits of
// its slice of the vocabulary, columns [first, first + columns) of the (B·T, Vp) logits that one
// process would hold, and the loss needs three numbers per row from every slice: the maximum
// logit, the sum of exp(logit - maximum) and the target's logit. The kernels compute a slice's
// share of each; the caller reduces them over the tp ranks between the kernels (max, then sum:
// model/vocab_parallel.h), so the full logits are never gathered. Megatron-LM's
// vocab_parallel_cross_entropy is the same computation in PyTorch.
//
// Instantiated for double, float and __nv_bfloat16 logits (bf16 storage, fp32 arithmetic, as the
// fused classifier: kernels/classifier.cuh). Columns whose vocabulary index is V or more (the
// padding) never count and get a zero gradient. One block per row.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/classifier.cuh"
#include "kernels/element.cuh"

// A slice of the padded vocabulary: the logits' columns (and tied wte's rows) [first, first + columns).
struct VocabularySlice {
  int first;
  int columns;
};

// For each of the BT rows of logits (BT, slice.columns): row_max[row] = the largest logit of the
// slice's vocabulary columns (-inf when the slice is all padding), target_logit[row] = the
// target's logit when this slice holds the target, else 0 (written, =). Summed over the slices,
// target_logit is the target's logit, and the maximum of row_max the row's maximum.
template <typename T>
void vocab_slice_max_and_target(Compute<T>* row_max, Compute<T>* target_logit, const T* logits, const int* targets,
                                size_t BT, VocabularySlice slice, int V, cudaStream_t stream);

// row_exp_sum[row] (BT) = the sum over the slice's vocabulary columns of exp(logit - row_max[row]),
// with row_max the maximum over all slices (written, =).
template <typename T>
void vocab_slice_exp_sum(Compute<T>* row_exp_sum, const T* logits, const Compute<T>* row_max, size_t BT,
                         VocabularySlice slice, int V, cudaStream_t stream);

// With row_max, row_exp_sum and target_logit reduced over all slices: losses[row] =
// log(row_exp_sum) + row_max - target_logit (=), the same on every slice, and the slice's logits
// overwritten (=) by dloss (softmax - one-hot(target)) on its vocabulary columns, 0 on padding. A
// target outside [0, V) gives loss 0 and gradient 0, and unless it is kIgnoredTarget (a padded
// position) it is recorded as the fused classifier does: *bad_target_row = max(*bad_target_row, row).
template <typename T>
void vocab_slice_loss_and_gradient(T* logits, Compute<T>* losses, const Compute<T>* row_max,
                                   const Compute<T>* row_exp_sum, const Compute<T>* target_logit, const int* targets,
                                   Compute<T> dloss, int* bad_target_row, size_t BT, VocabularySlice slice, int V,
                                   cudaStream_t stream);
