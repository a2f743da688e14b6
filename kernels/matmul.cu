// Fully connected layer (see kernels/matmul.cuh): the bias broadcast and bias-gradient
// kernels, then the launchers, which hand the products to cuBLAS.
#include "kernels/matmul.cuh"

#include "kernels/element.cuh"
#include "kernels/gemm.cuh"
#include "kernels/launch.cuh"

namespace {

// The bias broadcast: a block writes kBroadcastRows rows, its threads consecutive columns.
constexpr int kBroadcastThreads = 128;
constexpr int kBroadcastRows = 8;
// The bias-gradient block: 32 adjacent columns (one coalesced warp-wide row segment)
// times kBiasRowGroups groups of rows, summed in a fixed order at the end.
constexpr int kBiasColumns = 32;
constexpr int kBiasRowGroups = 16;

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

// dbias[oc] += sum over n of dout[n, oc]. Thread (x, y) of block b sums column
// b * 32 + x over rows y, y + 16, ...; the 16 partial sums are then added in order of y.
template <typename T>
__global__ void bias_gradient_kernel(T* dbias, const T* dout, int N, int OC) {  // dbias (OC), dout (N, OC)
  __shared__ Compute<T> partial[kBiasRowGroups][kBiasColumns];
  const int column = blockIdx.x * kBiasColumns + threadIdx.x;
  Compute<T> sum = 0;
  if (column < OC)
    for (int n = threadIdx.y; n < N; n += kBiasRowGroups) sum += to_compute(dout[size_t(n) * OC + column]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < OC) {
    Compute<T> total = 0;
    for (int group = 0; group < kBiasRowGroups; ++group) total += partial[group][threadIdx.x];
    dbias[column] = from_compute<T>(to_compute(dbias[column]) + total);
  }
}

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
void matmul_backward_input(cublasHandle_t cublas, T* dinp, const T* dout, const T* weight, int N, int C, int OC,
                           cudaStream_t stream) {
  gemm_batched<T>(cublas, false, false, N, C, OC, 1, dout, 0, weight, 0, 0, dinp, 0, 1, stream);
}

template <typename T>
void matmul_backward_weight(cublasHandle_t cublas, T* dweight, T* dbias, const T* dout, const T* inp, int N, int C,
                            int OC, cudaStream_t stream) {
  gemm_batched<T>(cublas, true, false, OC, C, N, 1, dout, 0, inp, 0, 1, dweight, 0, 1, stream);
  if (dbias != nullptr) {
    const unsigned blocks = unsigned((OC + kBiasColumns - 1) / kBiasColumns);
    launch(bias_gradient_kernel<T>, dim3(blocks), dim3(kBiasColumns, kBiasRowGroups), 0, stream, dbias, dout, N, OC);
  }
}

#define INSTANTIATE_MATMUL(T)                                                                                   \
  template void matmul_forward<T>(cublasHandle_t, T*, const T*, const T*, const T*, int, int, int, cudaStream_t); \
  template void matmul_backward_input<T>(cublasHandle_t, T*, const T*, const T*, int, int, int, cudaStream_t);    \
  template void matmul_backward_weight<T>(cublasHandle_t, T*, T*, const T*, const T*, int, int, int, cudaStream_t);
INSTANTIATE_MATMUL(double)
INSTANTIATE_MATMUL(float)
INSTANTIATE_MATMUL(__nv_bfloat16)
