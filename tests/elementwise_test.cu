// Elementwise kernels (kernels/elementwise.cuh): the body runs once for each element of [0, n) and
// for no other, whether n fills its blocks or not, in place as well as out of place. The CPU build
// runs a block as one loop in the natural thread order and thread by thread in the others, which
// the test runner's other orders cover.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/elementwise.cuh"
#include "tests/device_buffer.h"

namespace {

// out[i] = 3 x[i] + i: each element's value names its index.
struct ScaleAndAddIndex {
  float* out;
  const float* x;
  __device__ void operator()(size_t i) const { out[i] = 3 * x[i] + float(i); }
};

// n around the block's 256 threads and the CPU loop's chunks of 16.
const size_t kCounts[] = {1, 15, 16, 17, 255, 256, 257, 3 * 256 + 5, 4096, 100003};

TEST(Elementwise, EachElementOnceAndNoOther) {
  constexpr float kUntouched = -7.0f;
  for (size_t n : kCounts) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(i % 97) * 0.5f;
    DeviceBuffer<float> d_x(x), d_out(std::vector<float>(n + 64, kUntouched));
    launch_elementwise(ScaleAndAddIndex{d_out.data(), d_x.data()}, n, nullptr);
    const std::vector<float> out = d_out.to_host();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 3 * x[i] + float(i)) << "n " << n << ", element " << i;
    for (size_t i = n; i < n + 64; ++i) ASSERT_EQ(out[i], kUntouched) << "n " << n << ", written past the end at " << i;
  }
}

TEST(Elementwise, InPlace) {
  for (size_t n : kCounts) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(i % 89);
    DeviceBuffer<float> d(x);
    launch_elementwise(ScaleAndAddIndex{d.data(), d.data()}, n, nullptr);
    const std::vector<float> out = d.to_host();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 3 * x[i] + float(i)) << "n " << n << ", element " << i;
  }
}

}  // namespace
