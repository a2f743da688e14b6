// The vocabulary-parallel cross-entropy's kernels (kernels/vocab_parallel_cross_entropy.cuh): one
// block per row of a slice's logits, each thread a stride of its columns, the block's partial
// results joined warp by warp and then the warps in a fixed order, so that a row's result is
// the same on every run.
#include "kernels/vocab_parallel_cross_entropy.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/exponential.cuh"
#include "kernels/launch.cuh"
#include "kernels/warp_reduce.cuh"

namespace {

constexpr int kThreads = 512;  // a multiple of 32; as the fused classifier's rows

__device__ inline float logarithm(float x) { return logf(x); }
__device__ inline double logarithm(double x) { return log(x); }

// The columns of the slice that are vocabulary, not padding: [0, vocabulary_columns).
__device__ inline int vocabulary_columns(VocabularySlice slice, int V) {
  const int in_vocabulary = V - slice.first;
  return in_vocabulary < 0 ? 0 : (in_vocabulary < slice.columns ? in_vocabulary : slice.columns);
}

// The block's maximum or sum of value, on every thread: each warp reduces its lanes, then every
// thread joins the warps' results in warp order (one barrier; shared holds 32 partials).
template <typename C, bool kMax>
__device__ C block_reduce(C value, C* shared) {
  value = kMax ? warp_max(value) : warp_sum(value);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = value;
  __syncthreads();
  C total = shared[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w)
    total = kMax ? (shared[w] > total ? shared[w] : total) : total + shared[w];
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_and_target_kernel(Compute<T>* row_max, Compute<T>* target_logit, const T* logits, const int* targets,
                          VocabularySlice slice, int V) {
  using C = Compute<T>;
  __shared__ C partials[32];
  const size_t row = blockIdx.x;
  const T* row_logits = logits + row * slice.columns;  // (columns)
  const int columns = vocabulary_columns(slice, V);
  C max = C(-INFINITY);
  for (int i = threadIdx.x; i < columns; i += blockDim.x) {
    const C x = to_compute(row_logits[i]);
    max = x > max ? x : max;
  }
  max = block_reduce<C, true>(max, partials);
  if (threadIdx.x == 0) {
    const int column = targets[row] - slice.first;  // the target's column in this slice
    row_max[row] = max;
    target_logit[row] = 0 <= column && column < columns ? to_compute(row_logits[column]) : C(0);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    exp_sum_kernel(Compute<T>* row_exp_sum, const T* logits, const Compute<T>* row_max, VocabularySlice slice, int V) {
  using C = Compute<T>;
  __shared__ C partials[32];
  const size_t row = blockIdx.x;
  const T* row_logits = logits + row * slice.columns;  // (columns)
  const int columns = vocabulary_columns(slice, V);
  const C max = row_max[row];
  C sum = C(0);
  for (int i = threadIdx.x; i < columns; i += blockDim.x) sum += exponential(to_compute(row_logits[i]) - max);
  sum = block_reduce<C, false>(sum, partials);
  if (threadIdx.x == 0) row_exp_sum[row] = sum;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    loss_and_gradient_kernel(T* logits, Compute<T>* losses, const Compute<T>* row_max, const Compute<T>* row_exp_sum,
                             const Compute<T>* target_logit, const int* targets, Compute<T> dloss,
                             int* bad_target_row, VocabularySlice slice, int V) {
  using C = Compute<T>;
  const size_t row = blockIdx.x;
  T* row_logits = logits + row * slice.columns;  // (columns)
  const int columns = vocabulary_columns(slice, V);
  const int target = targets[row];
  const bool valid = 0 <= target && target < V;
  const C max = row_max[row], inverse_sum = C(1) / row_exp_sum[row];
  for (int i = threadIdx.x; i < slice.columns; i += blockDim.x) {
    C grad = C(0);
    if (valid && i < columns) {
      const C probability = exponential(to_compute(row_logits[i]) - max) * inverse_sum;
      grad = (probability - C(slice.first + i == target ? 1 : 0)) * dloss;
    }
    row_logits[i] = from_compute<T>(grad);
  }
  if (threadIdx.x == 0) {
    losses[row] = valid ? logarithm(row_exp_sum[row]) + max - target_logit[row] : C(0);
    if (!valid && target != kIgnoredTarget) atomicMax(bad_target_row, int(row));
  }
}

// At least 4 columns per thread: a narrow slice does not need (nor pay for) 512 threads.
dim3 threads_for(VocabularySlice slice) {
  return dim3(unsigned(std::max(32, std::min(kThreads, (slice.columns / 4 + 31) / 32 * 32))));
}

void check_slice(VocabularySlice slice, int V, const char* function) {
  if (V < 1 || slice.first < 0 || slice.columns < 1) {
    std::fprintf(stderr, "%s: need V >= 1, first >= 0 and columns >= 1, got V = %d, first = %d, columns = %d\n",
                 function, V, slice.first, slice.columns);
    std::exit(EXIT_FAILURE);
  }
}

}  // namespace

// ---- launchers ----

template <typename T>
void vocab_slice_max_and_target(Compute<T>* row_max, Compute<T>* target_logit, const T* logits, const int* targets,
                                size_t BT, VocabularySlice slice, int V, cudaStream_t stream) {
  check_slice(slice, V, "vocab_slice_max_and_target");
  if (BT == 0) return;
  launch(max_and_target_kernel<T>, dim3(unsigned(BT)), threads_for(slice), 0, stream, row_max, target_logit, logits,
         targets, slice, V);
}

template <typename T>
void vocab_slice_exp_sum(Compute<T>* row_exp_sum, const T* logits, const Compute<T>* row_max, size_t BT,
                         VocabularySlice slice, int V, cudaStream_t stream) {
  check_slice(slice, V, "vocab_slice_exp_sum");
  if (BT == 0) return;
  launch(exp_sum_kernel<T>, dim3(unsigned(BT)), threads_for(slice), 0, stream, row_exp_sum, logits, row_max, slice,
         V);
}

template <typename T>
void vocab_slice_loss_and_gradient(T* logits, Compute<T>* losses, const Compute<T>* row_max,
                                   const Compute<T>* row_exp_sum, const Compute<T>* target_logit, const int* targets,
                                   Compute<T> dloss, int* bad_target_row, size_t BT, VocabularySlice slice, int V,
                                   cudaStream_t stream) {
  check_slice(slice, V, "vocab_slice_loss_and_gradient");
  if (BT == 0) return;
  launch(loss_and_gradient_kernel<T>, dim3(unsigned(BT)), threads_for(slice), 0, stream, logits, losses, row_max,
         row_exp_sum, target_logit, targets, dloss, bad_target_row, slice, V);
}

#define INSTANTIATE_VOCAB_PARALLEL_CROSS_ENTROPY(T)                                                                 \
  template void vocab_slice_max_and_target<T>(Compute<T>*, Compute<T>*, const T*, const int*, size_t,              \
                                              VocabularySlice, int, cudaStream_t);                                 \
  template void vocab_slice_exp_sum<T>(Compute<T>*, const T*, const Compute<T>*, size_t, VocabularySlice, int,     \
                                       cudaStream_t);                                                              \
  template void vocab_slice_loss_and_gradient<T>(T*, Compute<T>*, const Compute<T>*, const Compute<T>*,            \
                                                 const Compute<T>*, const int*, Compute<T>, int*, size_t,          \
                                                 VocabularySlice, int, cudaStream_t);
INSTANTIATE_VOCAB_PARALLEL_CROSS_ENTROPY(double)
INSTANTIATE_VOCAB_PARALLEL_CROSS_ENTROPY(float)
INSTANTIATE_VOCAB_PARALLEL_CROSS_ENTROPY(__nv_bfloat16)
