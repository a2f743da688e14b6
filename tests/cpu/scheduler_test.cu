// The CPU build as a test harness for kernels: reordered threads expose a missing
// __syncthreads, poisoned dynamic shared memory exposes a read before write, and a
// barrier or warp collective that some thread never reaches is reported naming the
// kernel instead of hanging; cooperative_groups::reduce keeps the shuffles' order. And
// synccheck: threads meeting at different barriers, lanes calling a collective with
// different masks, a barrier or collective waiting for threads that returned, each named
// with its call sites. Also: launch-configuration errors as CUDA gives them.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/launch/launch_kernel.h"
#include "cpu/runtime/settings.h"
#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

// Launches and waits for the kernel: a failure while it runs shows at the next synchronisation,
// and ends the process there (the death tests' statement must die; CUDA_CHECK would throw).
template <typename... Params, typename... Args>
void launch_and_wait(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                     Args... args) {
  launch(kernel, grid, block, shared_bytes, stream, args...);
  if (cudaDeviceSynchronize() != cudaSuccess) std::exit(EXIT_FAILURE);
}

// Restores the settings a test changes.
class WithSettings : public testing::Test {
 protected:
  // Death tests re-execute the binary: safe with the OS threads that OpenBLAS starts.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override {  // once the test's kernels are done: they read the settings
    cudaDeviceSynchronize();
    cpu::settings() = saved_;
  }
  cpu::Settings saved_ = cpu::settings();
};
using Scheduler = WithSettings;

// Thread t reads what thread t-1 wrote to shared memory; the __syncthreads between
// the write and the read is missing unless `synchronise`.
__global__ void read_left_neighbour(float* out, const float* in, bool synchronise) {
  DYNAMIC_SHARED(float, tile);
  const int t = threadIdx.x;
  tile[t] = in[t];
  if (synchronise) __syncthreads();
  out[t] = t > 0 ? tile[t - 1] : 0.0f;
}

std::vector<float> run_left_neighbour(cpu::ThreadOrder order, bool synchronise) {
  cpu::settings().thread_order = order;
  const int n = 64;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = float(i + 1);
  DeviceBuffer<float> d_in(in), d_out(n);
  launch(read_left_neighbour, dim3(1), dim3(n), n * sizeof(float), nullptr, d_out.data(), d_in.data(), synchronise);
  return d_out.to_host();
}

std::vector<float> left_neighbour_expected() {
  std::vector<float> expect(64);
  for (int i = 1; i < 64; ++i) expect[i] = float(i);
  return expect;
}

TEST_F(Scheduler, NaturalOrderHidesAMissingSyncthreads) {
  EXPECT_EQ(run_left_neighbour(cpu::ThreadOrder::natural, false), left_neighbour_expected());
}

TEST_F(Scheduler, ReversedAndShuffledOrdersExposeAMissingSyncthreads) {
  EXPECT_NE(run_left_neighbour(cpu::ThreadOrder::reverse, false), left_neighbour_expected());
  EXPECT_NE(run_left_neighbour(cpu::ThreadOrder::shuffle, false), left_neighbour_expected());
}

TEST_F(Scheduler, WithItsSyncthreadsTheKernelIsRightInEveryOrder) {
  for (auto order : {cpu::ThreadOrder::natural, cpu::ThreadOrder::reverse, cpu::ThreadOrder::shuffle})
    EXPECT_EQ(run_left_neighbour(order, true), left_neighbour_expected());
}

__global__ void read_shared_before_write(float* out) {
  DYNAMIC_SHARED(float, tile);
  out[blockIdx.x * blockDim.x + threadIdx.x] = tile[threadIdx.x];
}

TEST_F(Scheduler, DynamicSharedMemoryIsPoisonedWhenTheOrderIsNotNatural) {
  cpu::settings().thread_order = cpu::ThreadOrder::shuffle;
  DeviceBuffer<float> out(3 * 32);
  launch(read_shared_before_write, dim3(3), dim3(32), 32 * sizeof(float), nullptr, out.data());
  for (float x : out.to_host()) EXPECT_TRUE(std::isnan(x));
}

// "tests/cpu/scheduler_test.cu:LINE", as synccheck names a call site.
std::string site(unsigned line) { return __FILE__ ":" + std::to_string(line); }

constexpr unsigned kBarrierAfterReturnLine = __LINE__ + 3;
__global__ void half_the_block_leaves_before_the_barrier(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST_F(Scheduler, ASyncthreadsReachedAfterSomeThreadsReturnedIsReportedWithItsSite) {
  DeviceBuffer<int> out(32);
  EXPECT_DEATH(launch_and_wait(half_the_block_leaves_before_the_barrier, dim3(2), dim3(32), 0, nullptr, out.data()),
               "kernel .*half_the_block_leaves_before_the_barrier.*, block \\([01],0,0\\): __syncthreads at " +
                   site(kBarrierAfterReturnLine) +
                   " reached by 16 of 32 threads; 16 returned without reaching it \\(thread \\(16,0,0\\)");
}

// The lower half of the block waits at one __syncthreads, the upper half at another (a
// cooperative-groups block sync, which is a barrier of the whole block too). A GPU's barrier
// counts arrivals, not places: this "works" there, by accident of the hardware, and is undefined.
constexpr unsigned kLowerHalfBarrierLine = __LINE__ + 4;
__global__ void halves_at_different_barriers(int* out) {
  int value = int(threadIdx.x);
  if (threadIdx.x < 16)
    __syncthreads();
  else
    cooperative_groups::this_thread_block().sync();
  out[threadIdx.x] = value;
}

TEST_F(Scheduler, ThreadsMeetingAtDifferentBarriersAreReportedNamingBothSites) {
  DeviceBuffer<int> out(32);
  EXPECT_DEATH(launch_and_wait(halves_at_different_barriers, dim3(1), dim3(32), 0, nullptr, out.data()),
               "kernel .*halves_at_different_barriers.*, block \\(0,0,0\\): threads of the block meet at different "
               "__syncthreads: thread \\(0,0,0\\) at " +
                   site(kLowerHalfBarrierLine) + ", thread \\(16,0,0\\) at " + site(kLowerHalfBarrierLine + 2));
}

constexpr unsigned kAbsentLanesLine = __LINE__ + 2;
__global__ void shuffle_with_absent_lanes(float* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, float(threadIdx.x), 1);
}

TEST_F(Scheduler, AWarpMaskNamingLanesThatDoNotExistIsReported) {
  DeviceBuffer<float> out(48);  // warp 1 has lanes 0-15 only
  EXPECT_DEATH(launch_and_wait(shuffle_with_absent_lanes, dim3(1), dim3(48), 0, nullptr, out.data()),
               "shuffle_with_absent_lanes.*__shfl_down_sync at " + site(kAbsentLanesLine) +
                   " in warp 1 .*waits for lanes that never come: lanes 16,17,.*,31 do not exist");
}

constexpr unsigned kReturnedLanesLine = __LINE__ + 3;
__global__ void lanes_leave_before_the_shuffle(float* out) {
  if (threadIdx.x % 32 >= 8) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

TEST_F(Scheduler, AWarpMaskNamingLanesThatReturnedIsReported) {
  DeviceBuffer<float> out(32);
  EXPECT_DEATH(launch_and_wait(lanes_leave_before_the_shuffle, dim3(1), dim3(32), 0, nullptr, out.data()),
               "lanes_leave_before_the_shuffle.*__shfl_xor_sync at " + site(kReturnedLanesLine) +
                   " in warp 0 \\(lane 0, mask 0xffffffff\\) waits for lanes that never come: lanes 8,9,.*,31 returned");
}

constexpr unsigned kOwnMaskLine = __LINE__ + 1;
__global__ void lane_outside_its_own_mask(int* out) { out[threadIdx.x] = __shfl_sync(0x1u, 5, 0); }

TEST_F(Scheduler, ALaneCallingWithAMaskWithoutItselfIsReported) {
  DeviceBuffer<int> out(32);
  EXPECT_DEATH(launch_and_wait(lane_outside_its_own_mask, dim3(1), dim3(32), 0, nullptr, out.data()),
               "__shfl_sync at " + site(kOwnMaskLine) + " called by lane 1 of warp 0 with mask 0x1, which does not "
               "include it");
}

// The lower half of a warp shuffles over the whole warp, the upper half over itself alone:
// lane 16 meets lanes whose mask names it with a mask of its own.
constexpr unsigned kWholeWarpMaskLine = __LINE__ + 4;
__global__ void halves_with_different_masks(float* out) {
  const float v = float(threadIdx.x);
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1);
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffff0000u, v, 1);
}

TEST_F(Scheduler, LanesCallingACollectiveWithDifferentMasksAreReportedNamingBoth) {
  DeviceBuffer<float> out(32);
  EXPECT_DEATH(launch_and_wait(halves_with_different_masks, dim3(1), dim3(32), 0, nullptr, out.data()),
               "halves_with_different_masks.*lanes of warp 0 meet in different collectives or with different masks "
               "\\(lane 16: __shfl_xor_sync with mask 0xffff0000 at " +
                   site(kWholeWarpMaskLine + 2) + "; lane 0: __shfl_xor_sync with mask 0xffffffff at " +
                   site(kWholeWarpMaskLine) + "\\)");
}

// Each half of the warp shuffles within itself, with its own mask: they never meet, and CUDA
// allows it.
__global__ void halves_each_with_its_own_mask(float* out) {
  const float v = float(threadIdx.x);
  out[threadIdx.x] = threadIdx.x < 16 ? __shfl_xor_sync(0x0000ffffu, v, 1) : __shfl_xor_sync(0xffff0000u, v, 1);
}

TEST_F(Scheduler, HalvesOfAWarpWithDisjointMasksRunInEveryOrder) {
  std::vector<float> expect(32);
  for (int t = 0; t < 32; ++t) expect[t] = float(t ^ 1);
  for (auto order : {cpu::ThreadOrder::natural, cpu::ThreadOrder::reverse, cpu::ThreadOrder::shuffle}) {
    cpu::settings().thread_order = order;
    DeviceBuffer<float> out(32);
    launch(halves_each_with_its_own_mask, dim3(1), dim3(32), 0, nullptr, out.data());
    EXPECT_EQ(out.to_host(), expect) << "order " << int(order);
  }
}

namespace cg = cooperative_groups;

// Each warp sums its lanes' values twice: with cooperative_groups::reduce and with an xor
// butterfly of shuffles.
__global__ void reduce_and_butterfly(float* reduced, float* butterfly, const float* in) {
  const auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  const float v = in[threadIdx.x];
  reduced[threadIdx.x] = cg::reduce(warp, v, cg::plus<float>());
  float sum = v;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  butterfly[threadIdx.x] = sum;
}

// The CPU build's reduce adds in the butterfly's order, so a kernel moving from shuffles to
// reduce keeps its results to the bit here. Values of many magnitudes make any other
// order round differently.
TEST_F(Scheduler, ReduceAddsInTheXorButterflysOrderInEveryThreadOrder) {
  const int n = 128;
  std::vector<float> in(n);
  for (int t = 0; t < n; ++t) in[t] = std::ldexp(float(t % 7) + 0.1f * float(t % 3), (t * 5) % 23 - 11);
  for (cpu::ThreadOrder order : {cpu::ThreadOrder::natural, cpu::ThreadOrder::reverse, cpu::ThreadOrder::shuffle}) {
    cpu::settings().thread_order = order;
    DeviceBuffer<float> d_in(in), reduced(n), butterfly(n);
    launch(reduce_and_butterfly, dim3(1), dim3(n), 0, nullptr, reduced.data(), butterfly.data(), d_in.data());
    const std::vector<float> r = reduced.to_host(), b = butterfly.to_host();
    for (int t = 0; t < n; ++t) EXPECT_EQ(r[t], b[t]) << "thread " << t << " order " << int(order);
  }
}

__global__ void reduce_meets_shuffle(float* out) {
  const auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  out[threadIdx.x] = threadIdx.x == 5 ? __shfl_xor_sync(0xffffffffu, 1.0f, 1) : cg::reduce(warp, 1.0f, cg::plus<float>());
}

TEST_F(Scheduler, AReduceMeetingAShuffleIsReported) {
  DeviceBuffer<float> out(32);
  EXPECT_DEATH(launch_and_wait(reduce_meets_shuffle, dim3(1), dim3(32), 0, nullptr, out.data()),
               "reduce_meets_shuffle.*meet in different collectives");
}

__global__ void reduce_in_a_partial_warp(float* out) {
  out[threadIdx.x] = cg::reduce(cg::tiled_partition<32>(cg::this_thread_block()), 1.0f, cg::plus<float>());
}

TEST_F(Scheduler, AReduceInAWarpWithAbsentLanesIsReported) {
  DeviceBuffer<float> out(40);  // warp 1 has lanes 0-7 only
  EXPECT_DEATH(launch_and_wait(reduce_in_a_partial_warp, dim3(1), dim3(40), 0, nullptr, out.data()),
               "cooperative_groups::reduce at .* in warp 1 .*waits for lanes that never come: lanes 8,9,.*,31 do not "
               "exist");
}

__global__ void empty_kernel() {}

// Calls the CPU build's launch directly, so that the error can be read instead of exiting.
cudaError_t try_launch(dim3 grid, dim3 block, size_t shared_bytes) {
  cpu::launch_kernel(reinterpret_cast<const void*>(&empty_kernel), grid, block, shared_bytes, nullptr,
                     [](const void*, cpu::ThreadStarts& starts) { cpu::start_threads(starts, empty_kernel); }, nullptr);
  return cudaGetLastError();
}

TEST_F(Scheduler, InvalidConfigurationsGiveCudasErrors) {
  EXPECT_EQ(try_launch(dim3(1), dim3(1024), 0), cudaSuccess);
  EXPECT_EQ(try_launch(dim3(1), dim3(1025), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(try_launch(dim3(1), dim3(32, 32, 2), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(try_launch(dim3(1), dim3(1, 1, 65), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(try_launch(dim3(0), dim3(32), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(try_launch(dim3(1, 65536), dim3(32), 0), cudaErrorInvalidConfiguration);
  EXPECT_EQ(try_launch(dim3(1), dim3(32), 48 << 10), cudaSuccess);
  EXPECT_EQ(try_launch(dim3(1), dim3(32), (48 << 10) + 1), cudaErrorInvalidValue);
}

TEST_F(Scheduler, OptingInRaisesTheDynamicSharedMemoryLimit) {
  EXPECT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void*>(&empty_kernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10),
            cudaSuccess);
  EXPECT_EQ(try_launch(dim3(1), dim3(32), 100 << 10), cudaSuccess);
  EXPECT_EQ(try_launch(dim3(1), dim3(32), (100 << 10) + 1), cudaErrorInvalidValue);
}

}  // namespace
