// The fused classifier (kernels/classifier.cuh): one block per row of logits computes the
// row's softmax statistics in one pass (online maximum and sum of exponentials), then
// writes the loss and overwrites the row with the loss's gradient.
#include "kernels/classifier.cuh"

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/exponential.cuh"
#include "kernels/launch.cuh"

namespace {

namespace cg = cooperative_groups;

constexpr int kClassifierThreads = 512;  // a multiple of 32; ~100 columns per thread at Vp = 50304

__device__ inline float logarithm(float x) { return logf(x); }
__device__ inline double logarithm(double x) { return log(x); }

// The softmax statistics of a set of values: their maximum and sum of exp(value - max).
// No values: max = -inf, sum = 0.
template <typename C>
struct SoftmaxStats {
  C max;
  C sum;
};

// The statistics of the union of two sets. Commutative bit for bit, so every lane of a
// butterfly ends with the same result. An empty part contributes nothing (its
// exp(-inf - max) could be NaN when both parts are empty).
template <typename C>
__device__ SoftmaxStats<C> merge(SoftmaxStats<C> a, SoftmaxStats<C> b) {
  const C max = a.max > b.max ? a.max : b.max;
  const C from_a = a.sum > 0 ? a.sum * exponential(a.max - max) : C(0);
  const C from_b = b.sum > 0 ? b.sum * exponential(b.max - max) : C(0);
  return {max, from_a + from_b};
}

template <typename T>
__global__ void __launch_bounds__(kClassifierThreads)
    classifier_kernel(T* logits, Compute<T>* losses, const int* targets, Compute<T> dloss, int* bad_target_row,
                      int V, int Vp) {
  using C = Compute<T>;
  const size_t row = blockIdx.x;
  T* row_logits = logits + row * Vp;  // (Vp)
  const int target = targets[row];
  const bool valid = 0 <= target && target < V;

  // Read before the barrier below: after it, the target's column is overwritten.
  const C target_logit = valid && threadIdx.x == 0 ? to_compute(row_logits[target]) : C(0);

  SoftmaxStats<C> stats{C(-INFINITY), C(0)};
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const C x = to_compute(row_logits[i]);
    if (x > stats.max) {
      stats.sum = stats.sum * exponential(stats.max - x) + C(1);
      stats.max = x;
    } else {
      stats.sum += exponential(x - stats.max);
    }
  }
  stats = cg::reduce(cg::tiled_partition<32>(cg::this_thread_block()), stats,
                     [](SoftmaxStats<C> a, SoftmaxStats<C> b) { return merge(a, b); });
  __shared__ C warp_max[32];
  __shared__ C warp_sum[32];
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = stats.max;
    warp_sum[threadIdx.x / 32] = stats.sum;
  }
  __syncthreads();
  // Every thread merges the warps' statistics in the same order: the same row statistics
  // everywhere without a second barrier.
  SoftmaxStats<C> row_stats{C(-INFINITY), C(0)};
  for (int w = 0; w < int(blockDim.x / 32); ++w) row_stats = merge(row_stats, {warp_max[w], warp_sum[w]});

  const C inverse_sum = C(1) / row_stats.sum;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    C grad = C(0);
    if (valid && i < V) {
      const C probability = exponential(to_compute(row_logits[i]) - row_stats.max) * inverse_sum;
      grad = (probability - C(i == target ? 1 : 0)) * dloss;
    }
    row_logits[i] = from_compute<T>(grad);
  }
  if (threadIdx.x == 0) {
    losses[row] = valid ? logarithm(row_stats.sum) + row_stats.max - target_logit : C(0);
    if (!valid && target != kIgnoredTarget) atomicMax(bad_target_row, int(row));
  }
}

// The loss sum's block: kLossThreads threads load a tile of kLossTile losses, coalesced, into
// shared memory; thread 0 then adds the tile in row order. The additions stay one chain in the
// host's order (a tree would round differently), but each reads shared memory instead of waiting
// on a global load.
constexpr int kLossThreads = 256;
constexpr int kLossTile = 4 * kLossThreads;  // 8 KB of doubles

// One block: the host's order of additions, tile by tile.
template <typename S>
__global__ void __launch_bounds__(kLossThreads) add_mean_loss_kernel(double* loss_sum, const S* losses, size_t BT,
                                                                                double divisor) {
  __shared__ double tile[kLossTile];
  double sum = 0.0;  // thread 0's
  for (size_t first = 0; first < BT; first += kLossTile) {
    const int count = BT - first < size_t(kLossTile) ? int(BT - first) : kLossTile;
    for (int i = threadIdx.x; i < count; i += kLossThreads) tile[i] = double(losses[first + i]);
    __syncthreads();
    if (threadIdx.x == 0)
      for (int i = 0; i < count; ++i) sum += tile[i];
    __syncthreads();  // the tile is read before the next one overwrites it
  }
  if (threadIdx.x == 0) *loss_sum += sum / divisor;
}

}  // namespace

// ---- launchers ----

template <typename T>
void classifier_forward_backward(T* logits, Compute<T>* losses, const int* targets, Compute<T> dloss,
                                 int* bad_target_row, size_t BT, int V, int Vp, cudaStream_t stream) {
  if (V < 1 || Vp < V) {
    std::fprintf(stderr, "classifier_forward_backward: need 1 <= V <= Vp, got V = %d, Vp = %d\n", V, Vp);
    std::exit(EXIT_FAILURE);
  }
  if (BT == 0) return;
  // At least 4 columns per thread: a small vocabulary does not need (nor pay for) 512 threads.
  const int threads = std::min(kClassifierThreads, (Vp / 4 + 31) / 32 * 32);
  launch(classifier_kernel<T>, dim3(unsigned(BT)), dim3(unsigned(std::max(threads, 32))), 0, stream, logits, losses,
         targets, dloss, bad_target_row, V, Vp);
}

template <typename S>
void add_mean_loss(double* loss_sum, const S* losses, size_t BT, double divisor, cudaStream_t stream) {
  if (BT == 0) return;
  launch(add_mean_loss_kernel<S>, dim3(1), dim3(kLossThreads), 0, stream, loss_sum, losses, BT, divisor);
}

void reset_bad_target_row(int* bad_target_row, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(bad_target_row, 0xff, sizeof(int), stream));  // all bits set: -1
}

int read_bad_target_row(const int* bad_target_row, cudaStream_t stream) {
  int row = -1;
  CUDA_CHECK(cudaMemcpyAsync(&row, bad_target_row, sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return row;
}

template void add_mean_loss<double>(double*, const double*, size_t, double, cudaStream_t);
template void add_mean_loss<float>(double*, const float*, size_t, double, cudaStream_t);
template void classifier_forward_backward<double>(double*, double*, const int*, double, int*, size_t, int, int,
                                                  cudaStream_t);
template void classifier_forward_backward<float>(float*, float*, const int*, float, int*, size_t, int, int,
                                                 cudaStream_t);
template void classifier_forward_backward<__nv_bfloat16>(__nv_bfloat16*, float*, const int*, float, int*, size_t,
                                                         int, int, cudaStream_t);
