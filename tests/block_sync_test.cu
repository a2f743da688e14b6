// CUDA semantics the kernels rely on, checked against plain C++: block reductions
// through __shared__ memory and __syncthreads, __syncthreads_count/and/or, dynamic
// shared memory. Runs in both builds.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

// One block per row: out[row] = sum of in[row, :], by a tree in shared memory.
__global__ void row_sum_shared(float* out, const float* in, int cols) {
  __shared__ float partial[256];
  const int row = blockIdx.x;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += in[row * cols + c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[row] = partial[0];
}

TEST(BlockSync, SharedMemoryTreeReductionMatchesLoop) {
  const int rows = 37, cols = 1000;
  std::vector<float> in(rows * cols);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i % 17) - 8.0f;  // small integers: sums exact
  DeviceBuffer<float> d_in(in), d_out(rows);
  launch(row_sum_shared, dim3(rows), dim3(256), 0, nullptr, d_out.data(), d_in.data(), cols);
  std::vector<float> out = d_out.to_host();
  for (int r = 0; r < rows; ++r)
    EXPECT_EQ(out[r], std::accumulate(in.begin() + r * cols, in.begin() + (r + 1) * cols, 0.0f)) << "row " << r;
}

__global__ void count_and_or(int* out, int threshold) {
  const int t = threadIdx.x;
  int count = __syncthreads_count(t < threshold);
  int all = __syncthreads_and(t < threshold);
  int any = __syncthreads_or(t < threshold);
  if (t == 0) out[0] = count, out[1] = all, out[2] = any;
}

TEST(BlockSync, CountAndOrAgreeWithThePredicates) {
  DeviceBuffer<int> out(3);
  for (int threshold : {0, 1, 100, 192}) {
    launch(count_and_or, dim3(1), dim3(192), 0, nullptr, out.data(), threshold);
    std::vector<int> r = out.to_host();
    EXPECT_EQ(r[0], threshold);
    EXPECT_EQ(r[1], threshold == 192 ? 1 : 0);
    EXPECT_EQ(r[2], threshold > 0 ? 1 : 0);
  }
}

// Reverses each block's slice through dynamic shared memory.
__global__ void reverse_through_dynamic_shared(float* out, const float* in) {
  DYNAMIC_SHARED(float, tile);
  const int base = blockIdx.x * blockDim.x, t = threadIdx.x;
  tile[t] = in[base + t];
  __syncthreads();
  out[base + t] = tile[blockDim.x - 1 - t];
}

TEST(BlockSync, DynamicSharedMemoryIsPerBlock) {
  const int blocks = 5, threads = 96;
  std::vector<float> in(blocks * threads);
  std::iota(in.begin(), in.end(), 0.0f);
  DeviceBuffer<float> d_in(in), d_out(in.size());
  launch(reverse_through_dynamic_shared, dim3(blocks), dim3(threads), threads * sizeof(float), nullptr,
         d_out.data(), d_in.data());
  std::vector<float> out = d_out.to_host();
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) EXPECT_EQ(out[b * threads + t], in[b * threads + threads - 1 - t]);
}

__global__ void write_index(int* out) {
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 10000 + t;
}

TEST(BlockSync, ThreeDimensionalIndicesCoverTheGridOnce) {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  const int total = 12 * 64;
  DeviceBuffer<int> out(total);
  launch(write_index, grid, block, 0, nullptr, out.data());
  std::vector<int> r = out.to_host();
  for (int i = 0; i < total; ++i) EXPECT_EQ(r[i], i / 64 * 10000 + i % 64);
}

}  // namespace
