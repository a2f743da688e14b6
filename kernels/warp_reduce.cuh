// Sum and maximum over the 32 lanes of a warp, through cooperative_groups::reduce: called
// by all 32 lanes, every lane gets the result. In the CPU build the lanes meet once
// (cpu/include/cooperative_groups/reduce.h) instead of once per shuffle.
#pragma once
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

template <typename Real>
__device__ inline Real warp_sum(Real value) {
  namespace cg = cooperative_groups;
  return cg::reduce(cg::tiled_partition<32>(cg::this_thread_block()), value, cg::plus<Real>());
}

template <typename Real>
__device__ inline Real warp_max(Real value) {
  namespace cg = cooperative_groups;
  return cg::reduce(cg::tiled_partition<32>(cg::this_thread_block()), value, cg::greater<Real>());
}
