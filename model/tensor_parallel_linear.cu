// The column- and row-parallel linear layers (model/tensor_parallel_linear.h): the slices and
// their host copies, then the layers, today's matmul kernels with the sums over tp between them.
#include "model/tensor_parallel_linear.h"

#include <cuda_bf16.h>

#include <stdexcept>
#include <string>

#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/cuda_check.cuh"
#include "kernels/matmul.cuh"

namespace {

void check_split(const char* what, int channels, int pieces) {
  if (channels % pieces != 0)
    throw std::invalid_argument(std::string("tensor-parallel linear layer: ") + what + " = " +
                                std::to_string(channels) + " do not split into " + std::to_string(pieces) +
                                " equal parts");
}

void check_ranks(int tp, int tp_rank) {
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
    throw std::invalid_argument("tensor-parallel linear layer: tp rank " + std::to_string(tp_rank) +
                                " of tp = " + std::to_string(tp) + " (tp >= 1, 0 <= tp rank < tp)");
}

// The layers run on the slice of the groups' own tp: a slice cut for another tp would sum wrong.
void check_groups(const CommGroups& groups, const LinearSlice& slice) {
  if (groups.mesh.tp != slice.tp || groups.mesh.tp_rank != slice.tp_rank)
    throw std::logic_error("tensor-parallel linear layer: a slice of tp rank " + std::to_string(slice.tp_rank) +
                           " of " + std::to_string(slice.tp) + " on tp rank " + std::to_string(groups.mesh.tp_rank) +
                           " of " + std::to_string(groups.mesh.tp));
}

// Where the slice's local row `row` (of local_out) and column 0 sit in the full weight (OC, C).
size_t full_row(const LinearSlice& s, int row) {
  if (!s.column_parallel) return size_t(row);
  const int part_rows = s.out_channels / s.parts, rows_held = part_rows / s.tp;
  return size_t(row / rows_held) * part_rows + size_t(s.tp_rank) * rows_held + row % rows_held;
}
size_t first_column(const LinearSlice& s) { return s.column_parallel ? 0 : size_t(s.tp_rank) * s.local_in(); }

}  // namespace

LinearSlice column_parallel_slice(int tp, int tp_rank, int in_channels, int out_channels, int parts) {
  check_ranks(tp, tp_rank);
  check_split("the output channels OC", out_channels, parts * tp);
  return {in_channels, out_channels, tp, tp_rank, true, parts};
}

LinearSlice row_parallel_slice(int tp, int tp_rank, int in_channels, int out_channels) {
  check_ranks(tp, tp_rank);
  check_split("the input channels C", in_channels, tp);
  return {in_channels, out_channels, tp, tp_rank, false, 1};
}

LinearSlice attention_qkv_slice(int tp, int tp_rank, int channels, int heads) {
  check_ranks(tp, tp_rank);
  check_split("the attention heads NH", heads, tp);
  check_split("the channels C", channels, heads);
  return column_parallel_slice(tp, tp_rank, channels, 3 * channels, 3);
}

template <typename Value>
void cut_linear_slice(const LinearSlice& slice, Value* weight_slice, Value* bias_slice, const Value* weight,
                      const Value* bias) {
  const int columns = slice.local_in();
  for (int row = 0; row < slice.local_out(); ++row) {
    const Value* from = weight + full_row(slice, row) * slice.in_channels + first_column(slice);
    for (int c = 0; c < columns; ++c) weight_slice[size_t(row) * columns + c] = from[c];
    if (bias != nullptr) bias_slice[row] = bias[full_row(slice, row)];
  }
}

template <typename Value>
void place_linear_slice(const LinearSlice& slice, Value* weight, Value* bias, const Value* weight_slice,
                        const Value* bias_slice) {
  const int columns = slice.local_in();
  for (int row = 0; row < slice.local_out(); ++row) {
    Value* to = weight + full_row(slice, row) * slice.in_channels + first_column(slice);
    for (int c = 0; c < columns; ++c) to[c] = weight_slice[size_t(row) * columns + c];
    if (bias != nullptr) bias[full_row(slice, row)] = bias_slice[row];
  }
}

TensorParallelOverlap create_tensor_parallel_overlap() {
  TensorParallelOverlap overlap;
  CUDA_CHECK(cudaStreamCreate(&overlap.stream));
  CUDA_CHECK(cudaEventCreateWithFlags(&overlap.input_gradient_ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&overlap.input_gradient_summed, cudaEventDisableTiming));
  return overlap;
}

void destroy_tensor_parallel_overlap(TensorParallelOverlap& overlap) {
  if (overlap.stream != nullptr) CUDA_CHECK(cudaStreamDestroy(overlap.stream));
  if (overlap.input_gradient_ready != nullptr) CUDA_CHECK(cudaEventDestroy(overlap.input_gradient_ready));
  if (overlap.input_gradient_summed != nullptr) CUDA_CHECK(cudaEventDestroy(overlap.input_gradient_summed));
  overlap = {};
}

template <typename Element>
void column_parallel_forward(cublasHandle_t cublas, const LinearSlice& slice, Element* out, const Element* inp,
                             const Element* weight_slice, const Element* bias_slice, int N, cudaStream_t stream) {
  matmul_forward(cublas, out, inp, weight_slice, bias_slice, N, slice.local_in(), slice.local_out(), stream);
}

template <typename Element>
void column_parallel_backward(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                              Element* dinp, Element* dweight_slice, Element* dbias_slice,
                              Compute<Element>* bias_workspace, const Element* dout, const Element* inp,
                              const Element* weight_slice, int N, const TensorParallelOverlap& overlap,
                              cudaStream_t stream) {
  check_groups(groups, slice);
  const int C = slice.local_in(), OC = slice.local_out();
  matmul_backward_input(cublas, dinp, dout, weight_slice, N, C, OC, stream);
  if (slice.tp > 1) {
    CUDA_CHECK(cudaEventRecord(overlap.input_gradient_ready, stream));
    CUDA_CHECK(cudaStreamWaitEvent(overlap.stream, overlap.input_gradient_ready, 0));
    allreduce_tensor_parallel(groups, dinp, size_t(N) * C, nccl_data_type<Element>(), ncclSum, overlap.stream);
  }
  matmul_backward_weight(cublas, dweight_slice, dbias_slice, bias_workspace, dout, inp, N, C, OC, stream);
  if (slice.tp > 1) {
    CUDA_CHECK(cudaEventRecord(overlap.input_gradient_summed, overlap.stream));
    CUDA_CHECK(cudaStreamWaitEvent(stream, overlap.input_gradient_summed, 0));
  }
}

template <typename Element>
void row_parallel_forward(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice, Element* out,
                          const Element* inp, const Element* weight_slice, const Element* bias, int N,
                          cudaStream_t stream) {
  check_groups(groups, slice);
  const int C = slice.local_in(), OC = slice.local_out();
  if (slice.tp == 1) {  // today's layer, the bias inside the GEMM's one rounding
    matmul_forward(cublas, out, inp, weight_slice, bias, N, C, OC, stream);
    return;
  }
  matmul_forward(cublas, out, inp, weight_slice, static_cast<const Element*>(nullptr), N, C, OC, stream);
  allreduce_tensor_parallel(groups, out, size_t(N) * OC, nccl_data_type<Element>(), ncclSum, stream);
  if (bias != nullptr) matmul_add_bias(out, bias, N, OC, stream);
}

template <typename Element>
void row_parallel_backward(cublasHandle_t cublas, const LinearSlice& slice, Element* dinp, Element* dweight_slice,
                           Element* dbias, Compute<Element>* bias_workspace, const Element* dout, const Element* inp,
                           const Element* weight_slice, int N, cudaStream_t stream) {
  row_parallel_backward_input(cublas, slice, dinp, dout, weight_slice, N, stream);
  parallel_linear_backward_weight(cublas, slice, dweight_slice, dbias, bias_workspace, dout, inp, N, stream);
}

template <typename Element>
void column_parallel_backward_input(const CommGroups& groups, cublasHandle_t cublas, const LinearSlice& slice,
                                    Element* dinp, const Element* dout, const Element* weight_slice, int N,
                                    cudaStream_t stream) {
  check_groups(groups, slice);
  const int C = slice.local_in(), OC = slice.local_out();
  matmul_backward_input(cublas, dinp, dout, weight_slice, N, C, OC, stream);
  if (slice.tp > 1)
    allreduce_tensor_parallel(groups, dinp, size_t(N) * C, nccl_data_type<Element>(), ncclSum, stream);
}

template <typename Element>
void row_parallel_backward_input(cublasHandle_t cublas, const LinearSlice& slice, Element* dinp, const Element* dout,
                                 const Element* weight_slice, int N, cudaStream_t stream) {
  matmul_backward_input(cublas, dinp, dout, weight_slice, N, slice.local_in(), slice.local_out(), stream);
}

template <typename Element>
void parallel_linear_backward_weight(cublasHandle_t cublas, const LinearSlice& slice, Element* dweight_slice,
                                     Element* dbias, Compute<Element>* bias_workspace, const Element* dout,
                                     const Element* inp, int N, cudaStream_t stream) {
  matmul_backward_weight(cublas, dweight_slice, dbias, bias_workspace, dout, inp, N, slice.local_in(),
                         slice.local_out(), stream);
}

size_t slice_row_start(const LinearSlice& slice, int row) {
  return full_row(slice, row) * slice.in_channels + first_column(slice);
}

SliceRuns slice_runs(const LinearSlice& slice) {
  const size_t C = size_t(slice.in_channels);
  if (!slice.column_parallel) return {first_column(slice), size_t(slice.local_in()), C};
  const size_t part_rows = size_t(slice.out_channels / slice.parts), rows_held = part_rows / slice.tp;
  return {slice_row_start(slice, 0), rows_held * C, part_rows * C};
}

template void cut_linear_slice<float>(const LinearSlice&, float*, float*, const float*, const float*);
template void cut_linear_slice<double>(const LinearSlice&, double*, double*, const double*, const double*);
template void place_linear_slice<float>(const LinearSlice&, float*, float*, const float*, const float*);
template void place_linear_slice<double>(const LinearSlice&, double*, double*, const double*, const double*);

#define INSTANTIATE_TENSOR_PARALLEL_LINEAR(Element)                                                                  \
  template void column_parallel_forward<Element>(cublasHandle_t, const LinearSlice&, Element*, const Element*,      \
                                                 const Element*, const Element*, int, cudaStream_t);                \
  template void column_parallel_backward<Element>(const CommGroups&, cublasHandle_t, const LinearSlice&, Element*, \
                                                  Element*, Element*, Compute<Element>*, const Element*,           \
                                                  const Element*, const Element*, int,                             \
                                                  const TensorParallelOverlap&, cudaStream_t);                     \
  template void row_parallel_forward<Element>(const CommGroups&, cublasHandle_t, const LinearSlice&, Element*,     \
                                              const Element*, const Element*, const Element*, int, cudaStream_t);   \
  template void row_parallel_backward<Element>(cublasHandle_t, const LinearSlice&, Element*, Element*, Element*,   \
                                               Compute<Element>*, const Element*, const Element*, const Element*, \
                                               int, cudaStream_t);                                           \
  template void column_parallel_backward_input<Element>(const CommGroups&, cublasHandle_t, const LinearSlice&,     \
                                                        Element*, const Element*, const Element*, int,             \
                                                        cudaStream_t);                                             \
  template void row_parallel_backward_input<Element>(cublasHandle_t, const LinearSlice&, Element*, const Element*, \
                                                     const Element*, int, cudaStream_t);                           \
  template void parallel_linear_backward_weight<Element>(cublasHandle_t, const LinearSlice&, Element*, Element*,  \
                                                         Compute<Element>*, const Element*, const Element*, int,  \
                                                         cudaStream_t);
INSTANTIATE_TENSOR_PARALLEL_LINEAR(double)
INSTANTIATE_TENSOR_PARALLEL_LINEAR(float)
INSTANTIATE_TENSOR_PARALLEL_LINEAR(__nv_bfloat16)
