// The tensor-parallel layers with sequence parallelism (model/sequence_parallel_linear.h).
#include "model/sequence_parallel_linear.h"

#include <cuda_bf16.h>

#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/cuda_check.cuh"
#include "kernels/matmul.cuh"

template <typename Element>
void gather_sequence(const CommGroups& groups, const Element* shard, Element* full, int N, int C, cudaStream_t stream) {
  allgather_tensor_parallel(groups, shard, full, size_t(N / groups.mesh.tp) * C, nccl_data_type<Element>(), stream);
}

template <typename Element>
Element* row_parallel_forward_scattered(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                                        Element* out_partial, const Element* inp, const Element* weight_slice,
                                        const Element* bias, int N, cudaStream_t stream) {
  const int C = slice.local_in(), OC = slice.local_out(), rows = N / slice.tp;
  Element* shard = out_partial + size_t(slice.tp_rank) * rows * OC;
  matmul_forward(cublas, out_partial, inp, weight_slice, static_cast<const Element*>(nullptr), N, C, OC, stream);
  reduce_scatter_tensor_parallel(groups, out_partial, shard, size_t(rows) * OC, nccl_data_type<Element>(), stream);
  if (bias != nullptr) matmul_add_bias(shard, bias, rows, OC, stream);
  return shard;
}

template <typename Element>
void column_parallel_backward_scattered(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                                        Element* dinp_shard, Element* dinp_partial, Element* dweight_slice,
                                        Element* dbias_slice, Compute<Element>* bias_workspace, const Element* dout,
                                        const Element* inp, const Element* weight_slice, int N,
                                        const TensorParallelOverlap& overlap, cudaStream_t stream) {
  const int C = slice.local_in(), OC = slice.local_out();
  matmul_backward_input(cublas, dinp_partial, dout, weight_slice, N, C, OC, stream);
  CUDA_CHECK(cudaEventRecord(overlap.input_gradient_ready, stream));
  CUDA_CHECK(cudaStreamWaitEvent(overlap.stream, overlap.input_gradient_ready, 0));
  reduce_scatter_tensor_parallel(groups, dinp_partial, dinp_shard, size_t(N / slice.tp) * C,
                                 nccl_data_type<Element>(), overlap.stream);
  matmul_backward_weight(cublas, dweight_slice, dbias_slice, bias_workspace, dout, inp, N, C, OC, stream);
  CUDA_CHECK(cudaEventRecord(overlap.input_gradient_summed, overlap.stream));
  CUDA_CHECK(cudaStreamWaitEvent(stream, overlap.input_gradient_summed, 0));
}

template <typename Element>
void column_parallel_backward_input_scattered(const CommGroups& groups, cublasHandle_t cublas,
                                              const LinearSlice& slice, Element* dinp_shard, Element* dinp_partial,
                                              const Element* dout, const Element* weight_slice, int N,
                                              cudaStream_t stream) {
  const int C = slice.local_in(), OC = slice.local_out();
  matmul_backward_input(cublas, dinp_partial, dout, weight_slice, N, C, OC, stream);
  reduce_scatter_tensor_parallel(groups, dinp_partial, dinp_shard, size_t(N / slice.tp) * C,
                                 nccl_data_type<Element>(), stream);
}

#define INSTANTIATE_SEQUENCE_PARALLEL_LINEAR(Element)                                                                \
  template void gather_sequence<Element>(const CommGroups&, const Element*, Element*, int, int, cudaStream_t);       \
  template Element* row_parallel_forward_scattered<Element>(const CommGroups&, cublasHandle_t, const LinearSlice&,  \
                                                            Element*, const Element*, const Element*,                \
                                                            const Element*, int, cudaStream_t);                      \
  template void column_parallel_backward_scattered<Element>(                                                          \
      const CommGroups&, cublasHandle_t, const LinearSlice&, Element*, Element*, Element*, Element*,                \
      Compute<Element>*, const Element*, const Element*, const Element*, int, const TensorParallelOverlap&,         \
      cudaStream_t);                                                                                                 \
  template void column_parallel_backward_input_scattered<Element>(const CommGroups&, cublasHandle_t,                 \
                                                                  const LinearSlice&, Element*, Element*,            \
                                                                  const Element*, const Element*, int, cudaStream_t);
INSTANTIATE_SEQUENCE_PARALLEL_LINEAR(double)
INSTANTIATE_SEQUENCE_PARALLEL_LINEAR(float)
INSTANTIATE_SEQUENCE_PARALLEL_LINEAR(__nv_bfloat16)
