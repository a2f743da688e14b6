// Warp shuffles and votes, checked against plain C++: every shuffle kind, a kernel
// in which only warp 0 shuffles, partial masks and sub-warp widths; and
// cooperative_groups::reduce over a warp tile. Runs in both builds.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

__device__ float warp_sum_xor(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// out[row] = sum of in[row, :], one warp per row (the layernorm layout).
__global__ void row_sum_warp(float* out, const float* in, int rows, int cols) {
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  float sum = 0.0f;
  if (warp < rows)
    for (int c = lane; c < cols; c += 32) sum += in[warp * cols + c];
  sum = warp_sum_xor(sum);
  if (warp < rows && lane == 0) out[warp] = sum;
}

TEST(Warp, XorReductionPerRowMatchesLoop) {
  const int rows = 45, cols = 77;  // rows not a multiple of the 4 warps per block
  std::vector<float> in(rows * cols);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(int(i * 7 % 13) - 6);  // exact sums
  DeviceBuffer<float> d_in(in), d_out(rows);
  launch(row_sum_warp, dim3((rows + 3) / 4), dim3(128), 0, nullptr, d_out.data(), d_in.data(), rows, cols);
  std::vector<float> out = d_out.to_host();
  for (int r = 0; r < rows; ++r) {
    float expect = 0.0f;
    for (int c = 0; c < cols; ++c) expect += in[r * cols + c];
    EXPECT_EQ(out[r], expect) << "row " << r;
  }
}

// Each lane records what every shuffle kind gives it, for widths 32 and 8.
__global__ void all_shuffles(int* out, int width) {
  const int lane = threadIdx.x % 32, v = 100 + int(threadIdx.x);
  int* o = out + threadIdx.x * 4;
  o[0] = __shfl_sync(0xffffffffu, v, 3, width);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2, width);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5, width);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 1 + lane % 2 * 2, width);  // lanes disagree on the xor mask
}

TEST(Warp, EveryShuffleKindFollowsItsDefinition) {
  const int threads = 64;
  for (int width : {32, 8}) {
    DeviceBuffer<int> out(threads * 4);
    launch(all_shuffles, dim3(1), dim3(threads), 0, nullptr, out.data(), width);
    std::vector<int> r = out.to_host();
    for (int t = 0; t < threads; ++t) {
      const int lane = t % 32, warp_base = t - lane, seg = lane / width * width, in_seg = lane - seg;
      const auto value = [&](int l) { return 100 + warp_base + l; };
      EXPECT_EQ(r[t * 4 + 0], value(seg + 3 % width)) << "shfl t=" << t << " width " << width;
      EXPECT_EQ(r[t * 4 + 1], in_seg >= 2 ? value(lane - 2) : value(lane)) << "up t=" << t;
      EXPECT_EQ(r[t * 4 + 2], in_seg + 5 < width ? value(lane + 5) : value(lane)) << "down t=" << t;
      const int x = lane ^ (1 + lane % 2 * 2);
      EXPECT_EQ(r[t * 4 + 3], x < seg + width ? value(x) : value(lane)) << "xor t=" << t;
    }
  }
}

// Only warp 0 shuffles; the other warps do unrelated work and never shuffle.
__global__ void only_warp0_shuffles(float* out, const float* in) {
  if (threadIdx.x < 32) {
    float v = warp_sum_xor(in[threadIdx.x]);
    if (threadIdx.x == 0) out[0] = v;
  } else {
    out[threadIdx.x - 31] = in[threadIdx.x] * 2.0f;
  }
}

TEST(Warp, ShufflesInOneWarpWhileOthersDoNot) {
  std::vector<float> in(256);
  for (int i = 0; i < 256; ++i) in[i] = float(i);
  DeviceBuffer<float> d_in(in), d_out(226);
  launch(only_warp0_shuffles, dim3(1), dim3(256), 0, nullptr, d_out.data(), d_in.data());
  std::vector<float> out = d_out.to_host();
  EXPECT_EQ(out[0], 31.0f * 32.0f / 2.0f);
  for (int t = 32; t < 256; ++t) EXPECT_EQ(out[t - 31], 2.0f * t);
}

// Lanes 0-15 and 16-31 reduce separately, each half with its own mask.
__global__ void half_warp_partial_masks(int* out) {
  const int lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int v = lane;
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_down_sync(mask, v, offset, 16);
  out[threadIdx.x] = v;
}

TEST(Warp, PartialMasksReduceTheirOwnHalves) {
  DeviceBuffer<int> out(32);
  launch(half_warp_partial_masks, dim3(1), dim3(32), 0, nullptr, out.data());
  std::vector<int> r = out.to_host();
  EXPECT_EQ(r[0], 0 + 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12 + 13 + 14 + 15);
  EXPECT_EQ(r[16], 16 * 16 + 120);
}

// Only the odd lanes take part, with a mask naming exactly them.
__global__ void odd_lanes_only(int* out) {
  const int lane = threadIdx.x % 32;
  if (lane % 2 == 1) out[lane] = __shfl_sync(0xaaaaaaaau, lane * 10, 31);
  else out[lane] = -1;
}

TEST(Warp, MaskOfNonContiguousLanes) {
  DeviceBuffer<int> out(32);
  launch(odd_lanes_only, dim3(1), dim3(32), 0, nullptr, out.data());
  std::vector<int> r = out.to_host();
  for (int l = 0; l < 32; ++l) EXPECT_EQ(r[l], l % 2 ? 310 : -1);
}

__global__ void votes(unsigned* out) {
  const int lane = threadIdx.x % 32;
  out[threadIdx.x * 3 + 0] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  out[threadIdx.x * 3 + 1] = __any_sync(0xffffffffu, threadIdx.x == 40);
  out[threadIdx.x * 3 + 2] = __all_sync(0xffffffffu, threadIdx.x < 32);
  __syncwarp();
}

TEST(Warp, BallotAnyAllAreWarpWide) {
  DeviceBuffer<unsigned> out(64 * 3);
  launch(votes, dim3(1), dim3(64), 0, nullptr, out.data());
  std::vector<unsigned> r = out.to_host();
  unsigned every_third = 0;
  for (int l = 0; l < 32; l += 3) every_third |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(r[t * 3 + 0], every_third);
    EXPECT_EQ(r[t * 3 + 1], t >= 32 ? 1u : 0u);  // only warp 1 holds thread 40
    EXPECT_EQ(r[t * 3 + 2], t < 32 ? 1u : 0u);
  }
}

__global__ void shuffle_doubles(double* out, const double* in) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, in[threadIdx.x], 31 - int(threadIdx.x));
}

// The values are made on the host: computed on the device, 1.0 + t 1e-10 may be one fused
// multiply-add, a rounding apart from the host's.
TEST(Warp, ShufflesCarryAllEightBytesOfADouble) {
  std::vector<double> in(32);
  for (int t = 0; t < 32; ++t) in[t] = 1.0 + t * 1e-10;  // needs all 64 bits
  DeviceBuffer<double> d_in(in), out(32);
  launch(shuffle_doubles, dim3(1), dim3(32), 0, nullptr, out.data(), d_in.data());
  std::vector<double> r = out.to_host();
  for (int t = 0; t < 32; ++t) EXPECT_EQ(r[t], in[31 - t]);
}

namespace cg = cooperative_groups;

struct ValueAndLane {
  float value;
  int lane;
};

// Per warp tile: the sum of ints, the largest and the smallest float, and (a custom
// operator on a struct) the smallest value with its lane, written by every lane.
__global__ void tile_reductions(int* sums, float* largest, float* smallest, ValueAndLane* least, const float* in) {
  const cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
  const unsigned t = cg::this_thread_block().thread_rank();
  const int lane = int(warp.thread_rank());
  sums[t] = cg::reduce(warp, lane * lane + int(warp.meta_group_rank()), cg::plus<int>());
  largest[t] = cg::reduce(warp, in[t], cg::greater<float>());
  smallest[t] = cg::reduce(warp, in[t], cg::less<float>());
  least[t] = cg::reduce(warp, ValueAndLane{in[t], lane},
                        [](ValueAndLane a, ValueAndLane b) { return b.value < a.value ? b : a; });
}

TEST(Warp, TileReductionsGiveEveryLaneTheWarpsResult) {
  const int threads = 96;
  std::vector<float> in(threads);
  for (int t = 0; t < threads; ++t) in[t] = float((t * 37) % 101) - 50.0f;  // distinct within a warp
  DeviceBuffer<float> d_in(in), largest(threads), smallest(threads);
  DeviceBuffer<int> sums(threads);
  DeviceBuffer<ValueAndLane> least(threads);
  launch(tile_reductions, dim3(1), dim3(threads), 0, nullptr, sums.data(), largest.data(), smallest.data(),
         least.data(), d_in.data());
  const std::vector<int> s = sums.to_host();
  const std::vector<float> hi = largest.to_host(), lo = smallest.to_host();
  const std::vector<ValueAndLane> min_lane = least.to_host();
  for (int t = 0; t < threads; ++t) {
    const int warp = t / 32;
    const float* row = in.data() + warp * 32;
    const int arg_min = int(std::min_element(row, row + 32) - row);
    EXPECT_EQ(s[t], 10416 + 32 * warp) << t;  // sum of l^2 for l < 32 is 10416
    EXPECT_EQ(hi[t], *std::max_element(row, row + 32)) << t;
    EXPECT_EQ(lo[t], row[arg_min]) << t;
    EXPECT_EQ(min_lane[t].value, row[arg_min]) << t;
    EXPECT_EQ(min_lane[t].lane, arg_min) << t;
  }
}

}  // namespace
