// Blocks of one launch spread over several OS threads (CUDA_CPU_BLOCK_THREADS):
// they really run on different threads, and atomics stay exact.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cpu/runtime/settings.h"
#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

std::mutex seen_mutex;
std::set<std::thread::id> seen_threads;

// Host code inside a kernel is possible only in the CPU build: this file is CPU-only.
__global__ void note_thread_and_count(float* sum, int* count) {
  if (threadIdx.x == 0) {
    std::lock_guard<std::mutex> lock(seen_mutex);
    seen_threads.insert(std::this_thread::get_id());
  }
  for (int i = 0; i < 50; ++i) atomicAdd(sum, 0.5f);  // halves: exact in any order below 2^24
  atomicAdd(count, 1);
}

TEST(BlockThreads, AtomicsFromBlocksOnFourOsThreadsLoseNothing) {
  const cpu::Settings saved = cpu::settings();
  cpu::settings().block_threads = 4;
  seen_threads.clear();
  DeviceBuffer<float> sum(std::vector<float>{0.0f});
  DeviceBuffer<int> count(std::vector<int>{0});
  const int blocks = 400, threads = 128;
  launch(note_thread_and_count, dim3(blocks), dim3(threads), 0, nullptr, sum.data(), count.data());
  EXPECT_EQ(count.to_host()[0], blocks * threads);
  EXPECT_EQ(sum.to_host()[0], 0.5f * 50 * blocks * threads);
  EXPECT_GT(seen_threads.size(), 1u);
  cpu::settings() = saved;  // once the kernel is done: its stream reads the settings as it runs
}

}  // namespace
