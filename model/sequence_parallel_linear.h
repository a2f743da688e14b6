// The column- and row-parallel layers of model/tensor_parallel_linear.h with sequence parallelism
// (issue 33 item 4; Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", section 4.2.2): the token-wise work between them (LayerNorm, residual)
// holds a shard of N / tp rows on each tp rank, rank r rows [r N / tp, (r + 1) N / tp), so
//
//   before a column-parallel layer: all-gather of the input shards (gather_sequence), where
//     tensor parallelism alone had a replicated input;
//   after a row-parallel layer: reduce-scatter of the partial outputs, where it had an all-reduce;
//   in the backward the swap: the column-parallel input gradient is reduce-scattered (instead of
//     all-reduced) and the row-parallel output gradient gathered first.
//
// A reduce-scatter adds the same tp partial products as the all-reduce did (the CPU build's NCCL
// in the same rank order: comm/tensor_parallel.h), so every row of a shard is the all-reduce's row:
// only the LayerNorms' parameter gradients, each rank's sum over its own rows then summed over tp,
// add in another order (model/gpt_sequence_parallel.cu). Nothing is allocated here.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "comm/groups.h"
#include "model/tensor_parallel_linear.h"

// full (N, C) = every tp rank's shard (N / tp, C) in tp-rank order (=). shard may be this rank's
// rows of full (in place).
template <typename Element>
void gather_sequence(const CommGroups& groups, const Element* shard, Element* full, int N, int C, cudaStream_t stream);

// out_partial (N, OC) = inp (N, C / tp) weight_slice^T, the rank's partial sum (=); then its rows
// [r N / tp, (r + 1) N / tp) are replaced by their sum over tp plus the bias (the whole bias, added
// once after the sum, as row_parallel_forward does). Returns those rows, the rank's output shard.
template <typename Element>
Element* row_parallel_forward_scattered(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                                        Element* out_partial, const Element* inp, const Element* weight_slice,
                                        const Element* bias, int N, cudaStream_t stream);

// column_parallel_backward with a reduce-scatter: dinp_partial (N, C) = dout weight_slice (=), the
// rank's partial input gradient, reduce-scattered on overlap.stream into dinp_shard (N / tp, C),
// the rank's rows of the summed input gradient (=), while the compute stream adds the weight's and
// bias's gradients (+=) from dout and inp (N rows: the gathered input). stream waits for the
// reduce-scatter before returning.
template <typename Element>
void column_parallel_backward_scattered(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                                        Element* dinp_shard, Element* dinp_partial, Element* dweight_slice,
                                        Element* dbias_slice, Compute<Element>* bias_workspace, const Element* dout,
                                        const Element* inp, const Element* weight_slice, int N,
                                        const TensorParallelOverlap& overlap, cudaStream_t stream);

// column_parallel_backward_scattered's input-gradient half, for the split backward's I
// (gpt_backward_input): dinp_partial (N, C) = dout weight_slice (=), reduce-scattered on stream
// itself into dinp_shard (N / tp, C) (=): I has no weight-gradient GEMM to overlap it with. The
// same partial products and the same reduce-scatter as the fused backward's, so the same shard.
// The weight's half is parallel_linear_backward_weight on dout and the gathered input.
template <typename Element>
void column_parallel_backward_input_scattered(const CommGroups& groups, cublasHandle_t cublas,
                                              const LinearSlice& slice, Element* dinp_shard, Element* dinp_partial,
                                              const Element* dout, const Element* weight_slice, int N,
                                              cudaStream_t stream);
