// Fully connected layer: out = inp weight^T + bias, its input gradient and its
// parameter gradients, over N rows (B * T) of C inputs and OC outputs. The products run
// on cuBLAS (host pointer mode; the handle is bound to the given stream); the bias add
// and the bias gradient are our kernels. Instantiated for double, float and
// __nv_bfloat16 (bf16 storage, fp32 accumulation).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/element.cuh"

// out (N, OC) = inp (N, C) weight^T + bias, with weight (OC, C) row-major and bias (OC),
// or no bias when bias is nullptr. Written (=). Saves nothing: the backward reads inp and weight.
template <typename T>
void matmul_forward(cublasHandle_t cublas, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC, cudaStream_t stream);

// out (N, OC) += bias (OC) on every row, rounded once: the bias of a product completed elsewhere
// first (the row-parallel layer adds it after the sum over the tp ranks, model/tensor_parallel_linear.h).
template <typename T>
void matmul_add_bias(T* out, const T* bias, int N, int OC, cudaStream_t stream);

// dinp (N, C) = dout (N, OC) weight (OC, C). Written (=).
template <typename T>
void matmul_backward_input(cublasHandle_t cublas, T* dinp, const T* dout, const T* weight, int N, int C, int OC,
                           cudaStream_t stream);

// Workspace of matmul_backward_weight's bias gradient, in Compute<T> elements: OC per chunk of
// 512 rows (the chunks' partial sums).
size_t matmul_bias_gradient_workspace_size(size_t N, int OC);

// dweight (OC, C) += dout^T (OC, N) inp (N, C), and dbias (OC) += the sum of dout's N rows
// unless dbias is nullptr. Accumulated (+=) across calls. The bias sum adds in a fixed order
// (within chunks of 512 rows, then over chunks), so it is bitwise reproducible; it uses
// bias_workspace (matmul_bias_gradient_workspace_size(N, OC) elements; unused without dbias).
template <typename T>
void matmul_backward_weight(cublasHandle_t cublas, T* dweight, T* dbias, Compute<T>* bias_workspace, const T* dout,
                            const T* inp, int N, int C, int OC, cudaStream_t stream);
