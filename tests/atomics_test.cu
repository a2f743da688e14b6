// Atomics from many blocks, checked against plain C++; in the CPU build, blocks may
// run on several OS threads (CUDA_CPU_BLOCK_THREADS; tests/cpu/ runs these with 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

__global__ void histogram(int* bins, const int* values, int n, int nbins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&bins[values[i] % nbins], 1);
}

TEST(Atomics, IntegerAddFromManyBlocksCountsEveryValue) {
  const int n = 100000, nbins = 7;
  std::vector<int> values(n);
  for (int i = 0; i < n; ++i) values[i] = i * 31 % 1001;
  DeviceBuffer<int> d_values(values), bins(std::vector<int>(nbins, 0));
  launch(histogram, dim3(64), dim3(128), 0, nullptr, bins.data(), d_values.data(), n, nbins);
  std::vector<int> expect(nbins, 0);
  for (int v : values) ++expect[v % nbins];
  EXPECT_EQ(bins.to_host(), expect);
}

__global__ void add_float_and_double(float* f, double* d, unsigned long long* u) {
  atomicAdd(f, 0.5f);  // exact in any order: sums of halves below 2^24
  atomicAdd(d, 0.25);
  atomicAdd(u, 3ull);
}

TEST(Atomics, FloatDoubleAndUnsignedAddsAreNotLost) {
  DeviceBuffer<float> f(std::vector<float>{0.0f});
  DeviceBuffer<double> d(std::vector<double>{0.0});
  DeviceBuffer<unsigned long long> u(std::vector<unsigned long long>{0});
  launch(add_float_and_double, dim3(200), dim3(256), 0, nullptr, f.data(), d.data(), u.data());
  EXPECT_EQ(f.to_host()[0], 0.5f * 200 * 256);
  EXPECT_EQ(d.to_host()[0], 0.25 * 200 * 256);
  EXPECT_EQ(u.to_host()[0], 3ull * 200 * 256);
}

__global__ void max_min_exch_cas(int* max_value, unsigned* min_value, int* claimed_by, int* last) {
  const int id = int(blockIdx.x * blockDim.x + threadIdx.x);
  atomicMax(max_value, (id * 7919) % 10007);
  atomicMin(min_value, unsigned((id * 104729) % 10009 + 5));
  atomicCAS(claimed_by, -1, id);  // exactly one thread claims
  atomicExch(last, id);
}

TEST(Atomics, MaxMinCasAndExchangeAgreeWithLoops) {
  const int blocks = 40, threads = 96, n = blocks * threads;
  DeviceBuffer<int> max_value(std::vector<int>{-1}), claimed(std::vector<int>{-1}), last(std::vector<int>{-1});
  DeviceBuffer<unsigned> min_value(std::vector<unsigned>{~0u});
  launch(max_min_exch_cas, dim3(blocks), dim3(threads), 0, nullptr, max_value.data(), min_value.data(),
         claimed.data(), last.data());
  int expect_max = -1;
  unsigned expect_min = ~0u;
  for (int id = 0; id < n; ++id) {
    expect_max = std::max(expect_max, (id * 7919) % 10007);
    expect_min = std::min(expect_min, unsigned((id * 104729) % 10009 + 5));
  }
  EXPECT_EQ(max_value.to_host()[0], expect_max);
  EXPECT_EQ(min_value.to_host()[0], expect_min);
  const int claimer = claimed.to_host()[0], final_writer = last.to_host()[0];
  EXPECT_GE(claimer, 0);
  EXPECT_LT(claimer, n);
  EXPECT_GE(final_writer, 0);
  EXPECT_LT(final_writer, n);
}

}  // namespace
