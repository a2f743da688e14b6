// CPU build: the part of CUDA's cooperative groups that our kernels use: the thread
// block, its warp-sized tiles, and (in <cooperative_groups/reduce.h>) reductions over
// a tile. Tiles of 32 threads only; a smaller tile fails to compile here rather than
// run untested. Each synchronising member takes its call site as __syncthreads does
// (cpu/launch/device_builtins.h).
#pragma once
#include <cuda_runtime.h>

namespace cooperative_groups {

class thread_block {
 public:
  void sync(CPU_CALL_SITE) const { __syncthreads(file, line); }
  unsigned thread_rank() const { return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 dim_threads() const { return blockDim; }
};

inline thread_block this_thread_block() { return {}; }

template <unsigned Size, typename Parent = void>
class thread_block_tile {
  static_assert(Size == 32, "the CPU build implements cooperative-groups tiles of 32 threads (a warp) only");

 public:
  thread_block_tile() = default;
  // As in CUDA, a tile that knows its parent converts to one that does not.
  template <typename P>
  thread_block_tile(const thread_block_tile<Size, P>&) {}
  void sync(CPU_CALL_SITE) const { __syncwarp(0xffffffffu, file, line); }
  unsigned thread_rank() const { return this_thread_block().thread_rank() % Size; }
  static constexpr unsigned size() { return Size; }
  static constexpr unsigned num_threads() { return Size; }
  unsigned meta_group_rank() const { return this_thread_block().thread_rank() / Size; }
  unsigned meta_group_size() const { return (this_thread_block().size() + Size - 1) / Size; }
  template <typename T>
  T shfl(T var, int src_rank, CPU_CALL_SITE) const { return __shfl_sync(0xffffffffu, var, src_rank, 32, file, line); }
  template <typename T>
  T shfl_xor(T var, int lane_mask, CPU_CALL_SITE) const {
    return __shfl_xor_sync(0xffffffffu, var, lane_mask, 32, file, line);
  }
  template <typename T>
  T shfl_down(T var, unsigned delta, CPU_CALL_SITE) const {
    return __shfl_down_sync(0xffffffffu, var, delta, 32, file, line);
  }
  template <typename T>
  T shfl_up(T var, unsigned delta, CPU_CALL_SITE) const {
    return __shfl_up_sync(0xffffffffu, var, delta, 32, file, line);
  }
  int any(int predicate, CPU_CALL_SITE) const { return __any_sync(0xffffffffu, predicate, file, line); }
  int all(int predicate, CPU_CALL_SITE) const { return __all_sync(0xffffffffu, predicate, file, line); }
  unsigned ballot(int predicate, CPU_CALL_SITE) const { return __ballot_sync(0xffffffffu, predicate, file, line); }
};

template <unsigned Size, typename Parent>
thread_block_tile<Size, Parent> tiled_partition(const Parent&) {
  return {};
}

}  // namespace cooperative_groups
