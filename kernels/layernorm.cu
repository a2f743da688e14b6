// LayerNorm (see kernels/layernorm.cuh): warp-per-row kernels for the forward, the fused
// residual forward and the input gradient; a two-pass fixed-order reduction over rows for
// the weight and bias gradients. Then the launchers.
#include "kernels/layernorm.cuh"

#include "kernels/launch.cuh"
#include "kernels/warp_reduce.cuh"

namespace {

constexpr int kWarpSize = 32;
constexpr int kRowThreads = 256;  // 8 warps, one row each
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
// The weight gradient's first pass: a block of 32 adjacent columns (a warp reads one
// coalesced row segment) by 8 row lanes sums a group of 128 rows. Fixed sizes, so the
// order of the sums depends on N and C only.
constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = 8;
constexpr int kRowsPerGroup = 128;
constexpr int kColumnThreads = 256;  // the second pass: one thread per column

__device__ inline float reciprocal_sqrt(float x) { return rsqrtf(x); }
__device__ inline double reciprocal_sqrt(double x) { return 1.0 / sqrt(x); }

// Called by a whole warp for one row: out (C) = layernorm of x (C); lane 0 stores the
// row's mean and rstd. The variance is taken around the mean (a second pass over the row,
// which is in L1) rather than as E[x^2] - mean^2, which cancels badly.
template <typename Element>
__device__ void normalize_row(Element* out, Compute<Element>* mean, Compute<Element>* rstd, const Element* x,
                              const Element* weight, const Element* bias, int C, int lane) {
  using Real = Compute<Element>;
  Real sum = 0;
  for (int c = lane; c < C; c += kWarpSize) sum += to_compute(x[c]);
  const Real row_mean = warp_sum(sum) / C;
  Real squares = 0;
  for (int c = lane; c < C; c += kWarpSize) {
    const Real centered = to_compute(x[c]) - row_mean;
    squares += centered * centered;
  }
  const Real row_rstd = reciprocal_sqrt(warp_sum(squares) / C + Real(1e-5));
  for (int c = lane; c < C; c += kWarpSize) {
    const Real normalized = (to_compute(x[c]) - row_mean) * row_rstd;
    out[c] = from_compute<Element>(normalized * to_compute(weight[c]) + to_compute(bias[c]));
  }
  if (lane == 0) *mean = row_mean, *rstd = row_rstd;
}

// One warp per row of inp (N, C); lane l takes channels l, l + 32, ...
template <typename Element>
__global__ void layernorm_forward_kernel(Element* out, Compute<Element>* mean, Compute<Element>* rstd,
                                         const Element* inp, const Element* weight, const Element* bias, size_t N,
                                         int C) {
  const size_t row = size_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row < N)  // the same for the whole warp, so every shuffle has all its lanes
    normalize_row(out + row * C, mean + row, rstd + row, inp + row * C, weight, bias, C, threadIdx.x % kWarpSize);
}

// As layernorm_forward_kernel, on the row residual = a + b, which is stored first; each lane
// reads back only the channels it wrote, so no synchronisation is needed.
template <typename Element>
__global__ void residual_layernorm_forward_kernel(Element* residual, Element* out, Compute<Element>* mean,
                                                  Compute<Element>* rstd, const Element* a, const Element* b,
                                                  const Element* weight, const Element* bias, size_t N, int C) {
  const size_t row = size_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row < N) {  // the same for the whole warp, so every shuffle has all its lanes
    for (int c = lane; c < C; c += kWarpSize) {
      const size_t i = row * C + c;
      residual[i] = from_compute<Element>(to_compute(a[i]) + to_compute(b[i]));
    }
    normalize_row(out + row * C, mean + row, rstd + row, residual + row * C, weight, bias, C, lane);
  }
}

// dinp += rstd (g - mean(g) - xhat mean(g xhat)) per row, with g = weight * dout and
// xhat = (inp - mean) rstd: the gradient through the normalisation. One warp per row.
template <typename Element>
__global__ void layernorm_backward_input_kernel(Element* dinp, const Element* dout, const Element* inp,
                                                const Element* weight, const Compute<Element>* mean,
                                                const Compute<Element>* rstd, size_t N, int C) {
  using Real = Compute<Element>;
  const size_t row = size_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row < N) {  // the same for the whole warp, so every shuffle has all its lanes
    const Element* x = inp + row * C;
    const Element* dy = dout + row * C;
    const Real row_mean = mean[row], row_rstd = rstd[row];
    Real g_sum = 0, g_xhat_sum = 0;
    for (int c = lane; c < C; c += kWarpSize) {
      const Real g = to_compute(weight[c]) * to_compute(dy[c]);
      g_sum += g;
      g_xhat_sum += g * (to_compute(x[c]) - row_mean) * row_rstd;
    }
    const Real g_mean = warp_sum(g_sum) / C, g_xhat_mean = warp_sum(g_xhat_sum) / C;
    Element* dx = dinp + row * C;
    for (int c = lane; c < C; c += kWarpSize) {
      const Real g = to_compute(weight[c]) * to_compute(dy[c]);
      const Real xhat = (to_compute(x[c]) - row_mean) * row_rstd;
      dx[c] = from_compute<Element>(to_compute(dx[c]) + row_rstd * (g - g_mean - xhat * g_xhat_mean));
    }
  }
}

// First pass of the parameter gradients: block (group, tile) sums, over the rows of group
// (kRowsPerGroup of them), dout * xhat and dout for the 32 columns of tile, into
// partials (2, groups, C): weight partials, then bias partials. Thread (x, y) sums rows
// y, y + 8, ... of the group for column x; row lane 0 then adds the 8 lanes in order.
template <typename Element>
__global__ void layernorm_weight_partials_kernel(Compute<Element>* partials, const Element* dout, const Element* inp,
                                                 const Compute<Element>* mean, const Compute<Element>* rstd, size_t N,
                                                 int C) {
  using Real = Compute<Element>;
  __shared__ Real weight_sums[kRowLanes][kColumnsPerBlock];
  __shared__ Real bias_sums[kRowLanes][kColumnsPerBlock];
  const size_t group = blockIdx.x, groups = gridDim.x;
  const int column = blockIdx.y * kColumnsPerBlock + threadIdx.x;
  const size_t first_row = group * kRowsPerGroup;
  const size_t end_row = first_row + kRowsPerGroup < N ? first_row + kRowsPerGroup : N;
  Real weight_sum = 0, bias_sum = 0;
  if (column < C) {
    for (size_t row = first_row + threadIdx.y; row < end_row; row += kRowLanes) {
      const Real dy = to_compute(dout[row * C + column]);
      weight_sum += dy * (to_compute(inp[row * C + column]) - mean[row]) * rstd[row];
      bias_sum += dy;
    }
  }
  weight_sums[threadIdx.y][threadIdx.x] = weight_sum;
  bias_sums[threadIdx.y][threadIdx.x] = bias_sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < C) {
    for (int lane = 1; lane < kRowLanes; ++lane) {
      weight_sum += weight_sums[lane][threadIdx.x];
      bias_sum += bias_sums[lane][threadIdx.x];
    }
    partials[group * C + column] = weight_sum;
    partials[(groups + group) * C + column] = bias_sum;
  }
}

// Second pass: dweight[c] += the weight partials of column c summed over groups in order,
// dbias[c] likewise. One thread per column.
template <typename Element>
__global__ void layernorm_weight_sum_kernel(Element* dweight, Element* dbias, const Compute<Element>* partials,
                                            size_t groups, int C) {
  using Real = Compute<Element>;
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column < C) {
    Real weight_sum = 0, bias_sum = 0;
    for (size_t group = 0; group < groups; ++group) {
      weight_sum += partials[group * C + column];
      bias_sum += partials[(groups + group) * C + column];
    }
    dweight[column] = from_compute<Element>(to_compute(dweight[column]) + weight_sum);
    dbias[column] = from_compute<Element>(to_compute(dbias[column]) + bias_sum);
  }
}

unsigned blocks_for(size_t count, int per_block) { return unsigned((count + per_block - 1) / per_block); }

}  // namespace

// ---- launchers ----

template <typename Element>
void layernorm_forward(Element* out, Compute<Element>* mean, Compute<Element>* rstd, const Element* inp,
                       const Element* weight, const Element* bias, size_t N, int C, cudaStream_t stream) {
  launch(layernorm_forward_kernel<Element>, dim3(blocks_for(N, kRowsPerBlock)), dim3(kRowThreads), 0, stream, out,
         mean, rstd, inp, weight, bias, N, C);
}

template <typename Element>
void residual_layernorm_forward(Element* residual_out, Element* out, Compute<Element>* mean, Compute<Element>* rstd,
                                const Element* a, const Element* b, const Element* weight, const Element* bias,
                                size_t N, int C, cudaStream_t stream) {
  launch(residual_layernorm_forward_kernel<Element>, dim3(blocks_for(N, kRowsPerBlock)), dim3(kRowThreads), 0,
         stream, residual_out, out, mean, rstd, a, b, weight, bias, N, C);
}

template <typename Element>
void layernorm_backward_input(Element* dinp, const Element* dout, const Element* inp, const Element* weight,
                              const Compute<Element>* mean, const Compute<Element>* rstd, size_t N, int C,
                              cudaStream_t stream) {
  launch(layernorm_backward_input_kernel<Element>, dim3(blocks_for(N, kRowsPerBlock)), dim3(kRowThreads), 0, stream,
         dinp, dout, inp, weight, mean, rstd, N, C);
}

size_t layernorm_backward_weight_workspace_size(size_t N, int C) {
  return 2 * size_t(blocks_for(N, kRowsPerGroup)) * C;
}

template <typename Element>
void layernorm_backward_weight(Element* dweight, Element* dbias, Compute<Element>* workspace, const Element* dout,
                               const Element* inp, const Compute<Element>* mean, const Compute<Element>* rstd,
                               size_t N, int C, cudaStream_t stream) {
  const unsigned groups = blocks_for(N, kRowsPerGroup);
  Compute<Element>* partials = workspace;  // (2, groups, C)
  launch(layernorm_weight_partials_kernel<Element>, dim3(groups, blocks_for(C, kColumnsPerBlock)),
         dim3(kColumnsPerBlock, kRowLanes), 0, stream, partials, dout, inp, mean, rstd, N, C);
  launch(layernorm_weight_sum_kernel<Element>, dim3(blocks_for(C, kColumnThreads)), dim3(kColumnThreads), 0, stream,
         dweight, dbias, partials, size_t(groups), C);
}

#define INSTANTIATE_LAYERNORM(E)                                                                                    \
  template void layernorm_forward<E>(E*, Compute<E>*, Compute<E>*, const E*, const E*, const E*, size_t, int,       \
                                     cudaStream_t);                                                                 \
  template void residual_layernorm_forward<E>(E*, E*, Compute<E>*, Compute<E>*, const E*, const E*, const E*,       \
                                              const E*, size_t, int, cudaStream_t);                                 \
  template void layernorm_backward_input<E>(E*, const E*, const E*, const E*, const Compute<E>*, const Compute<E>*, \
                                            size_t, int, cudaStream_t);                                             \
  template void layernorm_backward_weight<E>(E*, E*, Compute<E>*, const E*, const E*, const Compute<E>*,            \
                                             const Compute<E>*, size_t, int, cudaStream_t);
INSTANTIATE_LAYERNORM(double)
INSTANTIATE_LAYERNORM(float)
INSTANTIATE_LAYERNORM(__nv_bfloat16)
