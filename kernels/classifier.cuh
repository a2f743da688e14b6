// The fused classifier: softmax and cross-entropy over the vocabulary, and the loss's
// gradient with respect to the logits, in one kernel that overwrites the logits with
// their gradient (the (B·T, Vp) logits are the largest activation; no second buffer).
// Instantiated for double, float and __nv_bfloat16 logits (bf16 storage, fp32 arithmetic).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/element.cuh"

// The target of a position that holds no token, PyTorch's ignore_index: the padding of a shorter
// sequence in a microbatch (trainer/data/documents.h writes it as its kMaskedTarget; the data
// layer includes no kernels, so tests/classifier_test.cu asserts that the two agree).
constexpr int kIgnoredTarget = -1;

// For each of the BT rows of logits (BT, Vp), of which the first V columns are the
// vocabulary and columns V..Vp-1 padding: losses[row] = -log softmax(logits[row, :V])[target]
// (=), and logits[row, :] is overwritten (=) by dloss * d losses[row] / d logits[row, :],
// with 0 in the padding columns (dloss is the caller's scale, typically 1/(B·T) for a mean
// loss). targets (BT) index the vocabulary. A row whose target is kIgnoredTarget (a padded
// position) is skipped: loss 0, gradient row 0, and dloss then scales by the caller's count of
// real tokens, not B·T. A row whose target is any other value outside [0, V) is skipped the
// same way and recorded: *bad_target_row (1 int on the device) becomes max(*bad_target_row, row).
// The caller sets it to -1 first (reset_bad_target_row) and reads it when it likes
// (read_bad_target_row). Saves nothing.
template <typename T>
void classifier_forward_backward(T* logits, Compute<T>* losses, const int* targets, Compute<T> dloss,
                                 int* bad_target_row, size_t BT, int V, int Vp, cudaStream_t stream);

// *loss_sum (1) += the sum of losses (BT) / divisor (+=): the sum in double, in row order, so that
// it is bitwise the host's `for (row) sum += double(losses[row]); sum / divisor`. divisor BT gives
// the microbatch's mean loss; with padding (target -1, loss 0) the pipeline passes 1 and the
// trainer divides the step's sum by its real tokens. One block loads the losses
// a tile at a time, coalesced, into shared memory, where one thread adds them in order. One
// microbatch's few thousand additions: what it saves is the host wait of reading the losses.
template <typename S>
void add_mean_loss(double* loss_sum, const S* losses, size_t BT, double divisor, cudaStream_t stream);

// *bad_target_row = -1 (no bad target seen), on stream.
void reset_bad_target_row(int* bad_target_row, cudaStream_t stream);

// Waits for stream and returns *bad_target_row: -1 if every target seen since the reset was
// in [0, V), else the largest row (of its call) that had a bad target.
int read_bad_target_row(const int* bad_target_row, cudaStream_t stream);
