// Runs the threads of one CUDA block as fibers on the calling OS thread.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cpu/launch/thread_starts.h"
#include "cpu/runtime/settings.h"

namespace cpu {

// A fiber's stack. Its top is set back by a different multiple of 64 bytes for each stack:
// page-aligned tops would put the active frames of all fibers in the same few sets of the L1
// cache, so that a warp's 32 lanes switching in turn would miss it at every switch.
struct Stack {
  void* memory = nullptr;  // lowest address, a guard page
  size_t bytes = 0;
  size_t set_back = 0;
  void* top() const { return static_cast<char*>(memory) + bytes - set_back; }
  size_t usable() const { return bytes - 4096 - set_back; }
};

// racecheck (cpu/launch/race_fibers.cpp): a CUDA thread's ThreadSanitizer fiber, with the stack it
// always runs on, and what the blocks of one launch share.
struct RaceThread {
  void* fiber;
  Stack stack;
};
struct RaceLaunch {
  char end = 0;  // each CUDA thread releases it as it ends; the stream acquires it once the grid is done
  std::mutex mutex;
  std::vector<RaceThread> retired;  // used by the launch's blocks: no other block of it may have them
};
// Once every block of the launch is done: its fibers may run later launches' threads.
void race_launch_done(RaceLaunch& launch);

struct BlockLaunch {
  StartThreads start_threads;
  const void* call;
  dim3 block_dim;
  uint3 block_index;  // for messages; blockIdx itself is set by the caller
  ThreadOrder order;
  uint64_t seed;  // of the shuffled order
  RaceLaunch* race = nullptr;  // racecheck
};

// One per OS thread that runs blocks; keeps its fiber stacks from block to block.
class BlockRunner {
 public:
  explicit BlockRunner(size_t stack_bytes);
  ~BlockRunner();
  // Runs every thread of the block to the end. On a deadlock (a barrier or warp
  // collective that some thread never reaches) or a misused collective, returns
  // false with a one-line description in error.
  bool run(const BlockLaunch& launch, std::string& error);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cpu
