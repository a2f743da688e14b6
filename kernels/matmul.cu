// Fully connected layer (see kernels/matmul.cuh): the bias broadcast, the bias add and the bias
// gradient's two-pass fixed-order reduction over rows, then the launchers, which hand the products to cuBLAS.
#include "kernels/matmul.cuh"

#include "kernels/element.cuh"
#include "kernels/gemm.cuh"
#include "kernels/launch.cuh"

namespace {

// The bias broadcast: a block writes kBroadcastRows rows, its threads consecutive columns.
constexpr int kBroadcastThreads = 128;
constexpr int kBroadcastRows = 8;
// The bias gradient's first pass: a block of 32 adjacent columns (one coalesced warp-wide row
// segment) times kBiasRowGroups groups of rows sums a chunk of kBiasChunkRows rows; the second
// pass adds the chunks' sums in chunk order. Fixed sizes, so the order of the sums depends on N
// and OC only. Chunks give a GPU enough blocks: at GPT-2 124M (N = B T = 8 x 1024) 16 chunks, so
// 384, 1152 and 1536 blocks of 512 threads for OC = 768, 2304 and 3072, where one block per 32
// columns made 24, 72 and 96 (an A100 has 108 SMs, each holding 4 such blocks). A chunk of 512
// rows keeps N <= 512 (the default run's B T) in one chunk, summed in the order of before.
constexpr int kBiasColumns = 32;
constexpr int kBiasRowGroups = 16;
constexpr int kBiasChunkRows = 512;
constexpr int kBiasSumThreads = 256;  // the second pass: one thread per column

// out[n, oc] = bias[oc]: the GEMM then adds inp weight^T onto it (beta = 1), so that
// bf16 outputs are rounded once, after the bias is in. Block x writes the kBroadcastRows
// rows from x kBroadcastRows, its threads consecutive columns (coalesced, and no index is
// divided).
template <typename T>
__global__ void broadcast_bias_kernel(T* out, const T* bias, int N, int OC) {  // out (N, OC), bias (OC)
  const int first = blockIdx.x * kBroadcastRows;
  const int end = N - first < kBroadcastRows ? N : first + kBroadcastRows;
  for (int n = first; n < end; ++n)
    for (int oc = threadIdx.x; oc < OC; oc += kBroadcastThreads) out[size_t(n) * OC + oc] = bias[oc];
}

// out[n, oc] += bias[oc], with the broadcast's blocks and threads: for an output whose product
// is complete before the bias comes (the row-parallel layer's, after its sum over the tp ranks).
template <typename T>
__global__ void add_bias_kernel(T* out, const T* bias, int N, int OC) {  // out (N, OC), bias (OC)
  const int first = blockIdx.x * kBroadcastRows;
  const int end = N - first < kBroadcastRows ? N : first + kBroadcastRows;
  for (int n = first; n < end; ++n)
    for (int oc = threadIdx.x; oc < OC; oc += kBroadcastThreads) {
      T& element = out[size_t(n) * OC + oc];
      element = from_compute<T>(to_compute(element) + to_compute(bias[oc]));
    }
}

// First pass: block (chunk, tile) sums, over the rows of chunk, the 32 columns of tile into
// partials (chunks, OC). Thread (x, y) sums column x over rows y, y + 16, ... of the chunk; the
// 16 partial sums are then added in order of y.
template <typename T>
__global__ void bias_gradient_partials_kernel(Compute<T>* partials, const T* dout, int N, int OC) {  // dout (N, OC)
  __shared__ Compute<T> partial[kBiasRowGroups][kBiasColumns];
  const size_t chunk = blockIdx.x;
  const int column = blockIdx.y * kBiasColumns + threadIdx.x;
  const size_t first_row = chunk * kBiasChunkRows;
  const size_t end_row = first_row + kBiasChunkRows < size_t(N) ? first_row + kBiasChunkRows : size_t(N);
  Compute<T> sum = 0;
  if (column < OC)
    for (size_t n = first_row + threadIdx.y; n < end_row; n += kBiasRowGroups) sum += to_compute(dout[n * OC + column]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < OC) {
    Compute<T> total = 0;
    for (int group = 0; group < kBiasRowGroups; ++group) total += partial[group][threadIdx.x];
    partials[chunk * OC + column] = total;
  }
}

// Second pass: dbias[oc] += the chunks' sums of column oc, added in chunk order. One thread per
// column.
template <typename T>
__global__ void bias_gradient_sum_kernel(T* dbias, const Compute<T>* partials, size_t chunks, int OC) {  // dbias (OC)
  const int column = blockIdx.x * kBiasSumThreads + threadIdx.x;
  if (column < OC) {
    Compute<T> total = partials[column];
    for (size_t chunk = 1; chunk < chunks; ++chunk) total += partials[chunk * OC + column];
    dbias[column] = from_compute<T>(to_compute(dbias[column]) + total);
  }
}

unsigned blocks_for(size_t count, int per_block) { return unsigned((count + per_block - 1) / per_block); }

}  // namespace

// ---- launchers ----

template <typename T>
void matmul_forward(cublasHandle_t cublas, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC, cudaStream_t stream) {
  if (bias != nullptr) {
    const unsigned blocks = unsigned((N + kBroadcastRows - 1) / kBroadcastRows);
    launch(broadcast_bias_kernel<T>, dim3(blocks), dim3(kBroadcastThreads), 0, stream, out, bias, N, OC);
  }
  gemm_batched<T>(cublas, false, true, N, OC, C, 1, inp, 0, weight, 0, bias != nullptr ? 1 : 0, out, 0, 1, stream);
}

template <typename T>
void matmul_add_bias(T* out, const T* bias, int N, int OC, cudaStream_t stream) {
  const unsigned blocks = unsigned((N + kBroadcastRows - 1) / kBroadcastRows);
  if (blocks > 0) launch(add_bias_kernel<T>, dim3(blocks), dim3(kBroadcastThreads), 0, stream, out, bias, N, OC);
}

template <typename T>
void matmul_backward_input(cublasHandle_t cublas, T* dinp, const T* dout, const T* weight, int N, int C, int OC,
                           cudaStream_t stream) {
  gemm_batched<T>(cublas, false, false, N, C, OC, 1, dout, 0, weight, 0, 0, dinp, 0, 1, stream);
}

size_t matmul_bias_gradient_workspace_size(size_t N, int OC) { return blocks_for(N, kBiasChunkRows) * size_t(OC); }

template <typename T>
void matmul_backward_weight(cublasHandle_t cublas, T* dweight, T* dbias, Compute<T>* bias_workspace, const T* dout,
                            const T* inp, int N, int C, int OC, cudaStream_t stream) {
  gemm_batched<T>(cublas, true, false, OC, C, N, 1, dout, 0, inp, 0, 1, dweight, 0, 1, stream);
  if (dbias != nullptr && N > 0) {
    const unsigned chunks = blocks_for(size_t(N), kBiasChunkRows);
    Compute<T>* partials = bias_workspace;  // (chunks, OC)
    launch(bias_gradient_partials_kernel<T>, dim3(chunks, blocks_for(OC, kBiasColumns)),
           dim3(kBiasColumns, kBiasRowGroups), 0, stream, partials, dout, N, OC);
    launch(bias_gradient_sum_kernel<T>, dim3(blocks_for(OC, kBiasSumThreads)), dim3(kBiasSumThreads), 0, stream,
           dbias, partials, size_t(chunks), OC);
  }
}

#define INSTANTIATE_MATMUL(T)                                                                                   \
  template void matmul_forward<T>(cublasHandle_t, T*, const T*, const T*, const T*, int, int, int, cudaStream_t); \
  template void matmul_add_bias<T>(T*, const T*, int, int, cudaStream_t);                                         \
  template void matmul_backward_input<T>(cublasHandle_t, T*, const T*, const T*, int, int, int, cudaStream_t);    \
  template void matmul_backward_weight<T>(cublasHandle_t, T*, T*, Compute<T>*, const T*, const T*, int, int, int,  \
                                           cudaStream_t);
INSTANTIATE_MATMUL(double)
INSTANTIATE_MATMUL(float)
INSTANTIATE_MATMUL(__nv_bfloat16)
