// The race detector's own tests (`make racecheck`, cpu/check/race_annotations.h): races a GPU's
// racecheck reports are reported, naming the kernel, the threads and both source lines, and
// correct kernels are clean. Each kernel runs in a child process (a gtest death test) whose
// ThreadSanitizer stops at its first report with status 66, so that the injected races never
// reach the parent, which `make racecheck` runs and which must stay clean. Only in the
// racecheck build: elsewhere nothing watches for races.
#ifdef CPU_RACECHECK
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

constexpr int kReported = 66;  // ThreadSanitizer's exit status after a report

// Runs a death test's child with ThreadSanitizer stopping at its first report.
class Racecheck : public testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child is a new process: TSAN_OPTIONS apply
    const char* saved = std::getenv("TSAN_OPTIONS");
    saved_ = saved ? saved : "";
    had_options_ = saved != nullptr;
    setenv("TSAN_OPTIONS", (saved_ + " halt_on_error=1 exitcode=66").c_str(), 1);
  }
  void TearDown() override {
    if (had_options_) setenv("TSAN_OPTIONS", saved_.c_str(), 1);
    else unsetenv("TSAN_OPTIONS");
  }

 private:
  std::string saved_;
  bool had_options_ = false;
};

// Launches, waits for the kernel and ends the child: with status 0 unless a report stopped it.
template <typename... Params, typename... Args>
void run_and_exit(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Args... args) {
  launch(kernel, grid, block, shared_bytes, nullptr, args...);
  std::exit(cudaDeviceSynchronize() == cudaSuccess ? 0 : 1);
}

// "racecheck_test.cu:LINE:", as a report names a source line (file, line, column).
std::string line(unsigned n) { return "racecheck_test.cu:" + std::to_string(n) + ":"; }

// Thread t reads what thread t-1 wrote to shared memory; without the barrier, a race.
constexpr unsigned kNeighbourLine = __LINE__ + 4;  // the write; the read is 2 lines below
__global__ void read_left_neighbour(float* out, const float* in, bool synchronise) {
  __shared__ float tile[64];
  const int t = threadIdx.x;
  tile[t] = in[t];
  if (synchronise) __syncthreads();
  out[t] = t > 0 ? tile[t - 1] : 0.0f;
}

TEST_F(Racecheck, ANeighboursSharedValueReadWithoutABarrierIsReportedNamingTheKernelAndBothLines) {
  DeviceBuffer<float> in(std::vector<float>(64, 1.0f)), out(64);
  // Thread 1 reads tile[0] after thread 0 wrote it, with nothing between them.
  EXPECT_EXIT(run_and_exit(read_left_neighbour, dim3(1), dim3(64), 0, out.data(), in.data(), false),
              testing::ExitedWithCode(kReported),
              "WARNING: ThreadSanitizer: data race.*"
              "Read of size 4 at .* by thread T[0-9]+:\n *#0 [^\n]*read_left_neighbour[^\n]*" +
                  line(kNeighbourLine + 2) +
                  ".*Previous write of size 4 at .* by thread T[0-9]+:\n *#0 [^\n]*read_left_neighbour[^\n]*" +
                  line(kNeighbourLine) + ".*Location is TLS.*'CUDA thread \\(1,0,0\\) of block \\(0,0,0\\)'.*"
                  "'CUDA thread \\(0,0,0\\) of block \\(0,0,0\\)'");
}

TEST_F(Racecheck, TheSameKernelWithItsBarrierIsClean) {
  DeviceBuffer<float> in(std::vector<float>(64, 1.0f)), out(64);
  EXPECT_EXIT(run_and_exit(read_left_neighbour, dim3(1), dim3(64), 0, out.data(), in.data(), true),
              testing::ExitedWithCode(0), "");
}

// Thread 0 writes after the first barrier what thread 1 reads before the second: a barrier
// orders what comes before it against what comes after, not two threads' steps between two.
constexpr unsigned kBetweenBarriersLine = __LINE__ + 5;  // the write; the read is the next line
__global__ void between_two_barriers(float* out) {
  __shared__ float value;
  if (threadIdx.x == 0) value = 0;
  __syncthreads();
  if (threadIdx.x == 0) value = 1;
  if (threadIdx.x == 1) out[0] = value;
  __syncthreads();
}

TEST_F(Racecheck, AWriteAndAReadBetweenTheSameTwoBarriersAreReported) {
  DeviceBuffer<float> out(1);
  EXPECT_EXIT(run_and_exit(between_two_barriers, dim3(1), dim3(64), 0, out.data()), testing::ExitedWithCode(kReported),
              "WARNING: ThreadSanitizer: data race.*between_two_barriers[^\n]*" + line(kBetweenBarriersLine + 1) +
                  ".*between_two_barriers[^\n]*" + line(kBetweenBarriersLine));
}

// Thread 0 of every block writes the same word: blocks are in no order, so a race.
constexpr unsigned kSameWordLine = __LINE__ + 2;
__global__ void every_block_writes_one_word(int* word) {
  if (threadIdx.x == 0) *word = int(blockIdx.x);
}

TEST_F(Racecheck, TwoBlocksWritingTheSameGlobalWordAreReported) {
  DeviceBuffer<int> word(1);
  EXPECT_EXIT(run_and_exit(every_block_writes_one_word, dim3(2), dim3(32), 0, word.data()),
              testing::ExitedWithCode(kReported),
              "WARNING: ThreadSanitizer: data race.*Write of size 4 at .* by thread T[0-9]+:\n *#0 "
              "[^\n]*every_block_writes_one_word[^\n]*" +
                  line(kSameWordLine) + ".*Previous write of size 4 at .* by thread T[0-9]+:\n *#0 "
                  "[^\n]*every_block_writes_one_word[^\n]*" +
                  line(kSameWordLine) +
                  ".*(block \\(0,0,0\\)'.*block \\(1,0,0\\)'|block \\(1,0,0\\)'.*block \\(0,0,0\\)')");
}

// The sum of each block's 128 values: xor butterflies of shuffles within each warp (no barrier:
// the shuffles order the lanes), the warps' sums through shared memory after one barrier.
__global__ void block_sums(float* sums, const float* in) {
  __shared__ float warp_sums[4];
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) sums[blockIdx.x] = warp_sums[0] + warp_sums[1] + warp_sums[2] + warp_sums[3];
}

// Twice, so that the second launch's blocks run on the fiber stacks and in the shared memory of
// the first's: neither may look like a race with them.
void block_sums_twice() {
  std::vector<float> values(4 * 128);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 7);
  DeviceBuffer<float> in(values), sums(4);
  for (int launch_number = 0; launch_number < 2; ++launch_number) {
    launch(block_sums, dim3(4), dim3(128), 0, nullptr, sums.data(), in.data());
    std::vector<float> got = sums.to_host();
    for (int b = 0; b < 4; ++b) {
      float expect = 0;
      for (int i = 0; i < 128; ++i) expect += values[b * 128 + i];
      if (got[b] != expect) std::exit(2);
    }
  }
  std::exit(0);
}

TEST_F(Racecheck, ACorrectWarpShuffleReductionIsClean) {
  EXPECT_EXIT(block_sums_twice(), testing::ExitedWithCode(0), "");
}

// Each lane reads what the next lane wrote to shared memory, after __syncwarp: the warp's
// collectives order its lanes' memory as its barrier does (CUDA: __syncwarp "guarantees memory
// ordering among threads participating in the barrier").
__global__ void rotate_through_shared_memory(float* out) {
  __shared__ float lanes[32];
  lanes[threadIdx.x] = float(threadIdx.x);
  __syncwarp();
  out[threadIdx.x] = lanes[(threadIdx.x + 1) % 32];
}

TEST_F(Racecheck, LanesExchangingThroughSharedMemoryAfterSyncwarpAreClean) {
  DeviceBuffer<float> out(32);
  EXPECT_EXIT(run_and_exit(rotate_through_shared_memory, dim3(1), dim3(32), 0, out.data()), testing::ExitedWithCode(0),
              "");
}

}  // namespace
#endif
