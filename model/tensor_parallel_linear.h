// The column- and row-parallel linear layers of a tensor-parallel stage (issue 33; Megatron-LM's
// ColumnParallelLinear and RowParallelLinear): which part of a full layer a tp rank holds, the
// cut of that part from the full layer and its way back, and the layers' forward and backward
// over kernels/matmul.cuh, with their sums over the tp ranks through comm/tensor_parallel.h.
//
// A full layer is out (N, OC) = inp (N, C) weight^T + bias, weight (OC, C) row-major (llm.c's and
// PyTorch's layout: Megatron's Y = X A with A = weight^T, so its columns are our rows).
//
//   column-parallel (QKV, fc1): each rank holds OC / tp of the output rows of the weight and
//     their bias. The input is replicated, the output is the rank's columns of the full output:
//     no communication in the forward. Backward: each rank's input gradient is a partial sum
//     over its outputs; one all-reduce of N C over tp completes it.
//   row-parallel (attention projection, fc2): each rank holds C / tp of the input columns of the
//     weight, and the whole bias. The input is the rank's columns (the column-parallel layer's
//     output), the output a partial sum: one all-reduce of N OC over tp, then the bias, added
//     once. Backward: no communication (below).
//
// So an MLP block, fc1 (column) -> GELU (local, elementwise) -> fc2 (row), and an attention
// block, QKV (column, by heads) -> attention (local: a rank's heads need no other's) ->
// projection (row), each communicate once in the forward and once in the backward.
//
// Nothing is allocated in the layers: the caller owns every buffer. With tp = 1 every function
// is today's matmul_forward / matmul_backward_* on the whole layer, bitwise, with no collective.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "comm/groups.h"
#include "kernels/element.cuh"

// The part of a full layer (weight (OC, C), bias (OC)) that tp rank tp_rank holds.
struct LinearSlice {
  int in_channels, out_channels;  // the full layer's C and OC
  int tp, tp_rank;
  bool column_parallel;  // holds output rows (column-parallel) or input columns (row-parallel)
  // Column-parallel: the output is `parts` blocks of OC / parts rows, each cut alike, so that the
  // rank holds rows [tp_rank OC / (parts tp), (tp_rank + 1) OC / (parts tp)) of every block.
  // QKV's output is q | k | v (C each, heads one after another: kernels/attention.cuh): parts = 3
  // gives the rank its own heads' rows of q, of k and of v, a local output (N, 3 C / tp) laid out
  // q | k | v as attention_forward expects with C / tp channels and NH / tp heads. Row-parallel: 1.
  int parts;

  int local_in() const { return column_parallel ? in_channels : in_channels / tp; }
  // Also the held bias's length: the slice's rows (column-parallel) or the whole bias (row-parallel).
  int local_out() const { return column_parallel ? out_channels / tp : out_channels; }
};

// The slices, checked: std::invalid_argument with one line naming the size when tp < 1, tp_rank is
// outside [0, tp), or tp (times parts) does not divide the channels it cuts.
LinearSlice column_parallel_slice(int tp, int tp_rank, int in_channels, int out_channels, int parts = 1);
LinearSlice row_parallel_slice(int tp, int tp_rank, int in_channels, int out_channels);
// The attention's QKV projection (C -> 3 C) by heads: tp must divide the NH heads (a head is never
// split), then column_parallel_slice(tp, tp_rank, C, 3 C, 3).
LinearSlice attention_qkv_slice(int tp, int tp_rank, int channels, int heads);

// Host copies (the checkpoint's files hold the full layers, in float): cut writes the slice of the
// full weight (OC, C) and bias (OC) into weight_slice (local_out, local_in) and bias_slice
// (local_out); place writes a slice back into its place in the full layer and leaves the rest, so
// the slices of every tp rank placed in turn give back the full layer (a row-parallel bias is
// written whole, the same from every rank). bias and bias_slice: both nullptr for no bias.
template <typename Value>
void cut_linear_slice(const LinearSlice& slice, Value* weight_slice, Value* bias_slice, const Value* weight,
                      const Value* bias);
template <typename Value>
void place_linear_slice(const LinearSlice& slice, Value* weight, Value* bias, const Value* weight_slice,
                        const Value* bias_slice);
// Where the slice's row `row` (of local_out) starts in the full (OC, C) matrix, in elements: its
// local_in values are consecutive there (a host gather of the slices sends these runs).
size_t slice_row_start(const LinearSlice& slice, int row);
// The slice's elements (local_out x local_in, row-major) as runs of consecutive elements of the
// full (OC, C) matrix: run k holds `length` elements from first + k stride (a column-parallel
// slice: each part's rows, one run; a row-parallel one: each row's columns). What gives a sliced
// element its full-model index, bf16's stochastic-rounding key (trainer/step/optimizer.cpp).
struct SliceRuns {
  size_t first, length, stride;
};
SliceRuns slice_runs(const LinearSlice& slice);

// The communication stream of the column-parallel backward and the two events that order it with
// the compute stream, made once by the caller (create_tensor_parallel_overlap) and kept.
struct TensorParallelOverlap {
  cudaStream_t stream = nullptr;
  cudaEvent_t input_gradient_ready = nullptr;   // on compute: the input gradient's GEMM has run
  cudaEvent_t input_gradient_summed = nullptr;  // on stream: its all-reduce has run
};
TensorParallelOverlap create_tensor_parallel_overlap();
void destroy_tensor_parallel_overlap(TensorParallelOverlap& overlap);

// out (N, OC / tp) = inp (N, C) weight_slice^T + bias_slice: the rank's columns of the full
// output (=). No communication. bias_slice nullptr: no bias.
template <typename Element>
void column_parallel_forward(cublasHandle_t cublas, const LinearSlice& slice, Element* out, const Element* inp,
                             const Element* weight_slice, const Element* bias_slice, int N, cudaStream_t stream);

// dinp (N, C) = the full input gradient on every tp rank (=): the rank's dout (N, OC / tp)
// weight_slice, then an all-reduce sum over tp on overlap.stream, which runs while the compute
// stream adds the weight's gradient, dweight_slice (OC / tp, C) += dout^T inp, and the bias's,
// dbias_slice (OC / tp) += the sum of dout's rows (as Megatron overlaps them: the weight
// gradient needs dout and inp only). Before returning, stream waits for the all-reduce, so what
// the caller queues next on it reads the summed dinp. The two gradients need no communication:
// each is of the rank's own rows. bias_workspace: matmul_bias_gradient_workspace_size(N, OC / tp).
// With tp = 1 nothing is summed and overlap is not used.
template <typename Element>
void column_parallel_backward(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                              Element* dinp, Element* dweight_slice, Element* dbias_slice,
                              Compute<Element>* bias_workspace, const Element* dout, const Element* inp,
                              const Element* weight_slice, int N, const TensorParallelOverlap& overlap,
                              cudaStream_t stream);

// out (N, OC) = the full output on every tp rank (=): inp (N, C / tp), the rank's columns of the
// full input, times weight_slice^T is the rank's partial sum over its inputs; an all-reduce sum
// over tp adds the partial sums; then bias (OC, the whole of it, on every rank) is added once (had
// each rank added it before the sum, it would count tp times). The sum adds tp partial products
// in another order than one GEMM over C: equal to one process within rounding, not bitwise
// (docs/pipeline.md, "Tensor parallelism"). bias nullptr: no bias.
template <typename Element>
void row_parallel_forward(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice, Element* out,
                          const Element* inp, const Element* weight_slice, const Element* bias, int N,
                          cudaStream_t stream);

// No communication: the forward's output is replicated, so dout (N, OC) is the same on every tp
// rank. dinp (N, C / tp) = dout weight_slice, the gradient of the rank's input columns (=), which
// is all the column-parallel layer before it needs; dweight_slice (OC, C / tp) += dout^T inp; dbias
// (OC) += the sum of dout's rows, the same dout through the same fixed-order kernel on every rank,
// so the replicated bias gets bitwise the same gradient everywhere and stays equal (the norm must
// count it once). bias_workspace: matmul_bias_gradient_workspace_size(N, OC).
template <typename Element>
void row_parallel_backward(cublasHandle_t cublas, const LinearSlice& slice, Element* dinp, Element* dweight_slice,
                           Element* dbias, Compute<Element>* bias_workspace, const Element* dout, const Element* inp,
                           const Element* weight_slice, int N, cudaStream_t stream);

// The two backwards above split into their input-gradient half (I) and weight-gradient half (W),
// for the zero-bubble schedules (model/gpt.cuh, gpt_backward_input and gpt_backward_weight). The
// column-parallel layer's all-reduce completes its input gradient, so it belongs to I, here on
// `stream` itself: I has no weight-gradient GEMM to overlap it with. W communicates nothing, for
// either kind: each rank's weight gradient is of its own slice, the row-parallel bias's of the
// replicated dout. Each computes what the fused backward computes, bitwise: the same kernels on the
// same values, and the same all-reduce of the same partial sums.
// dinp (N, C) = the summed input gradient on every tp rank (=), as column_parallel_backward's.
template <typename Element>
void column_parallel_backward_input(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                                    Element* dinp, const Element* dout, const Element* weight_slice, int N,
                                    cudaStream_t stream);
// dinp (N, C / tp) = dout weight_slice (=), as row_parallel_backward's.
template <typename Element>
void row_parallel_backward_input(cublasHandle_t cublas, const LinearSlice& slice, Element* dinp, const Element* dout,
                                 const Element* weight_slice, int N, cudaStream_t stream);
// dweight_slice (local_out, local_in) += dout^T inp, dbias (local_out) += the sum of dout's rows
// (nullptr: no bias), for a slice of either kind.
template <typename Element>
void parallel_linear_backward_weight(cublasHandle_t cublas, const LinearSlice& slice, Element* dweight_slice,
                                     Element* dbias, Compute<Element>* bias_workspace, const Element* dout,
                                     const Element* inp, int N, cudaStream_t stream);
