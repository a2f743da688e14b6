// Runs the threads of one CUDA block as fibers on the calling OS thread.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "cpu/launch_kernel.h"
#include "cpu/settings.h"

namespace cpu {

struct BlockLaunch {
  StartThreads start_threads;
  const void* call;
  dim3 block_dim;
  uint3 block_index;  // for messages; blockIdx itself is set by the caller
  ThreadOrder order;
  uint64_t seed;  // of the shuffled order
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
