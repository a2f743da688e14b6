// The global gradient norm and clipping by scaling. The squared norm is deterministic:
// every tensor is reduced by a number of blocks fixed by its size into a caller's workspace, then
// summed in a fixed order, with no atomics, so repeated runs agree bit for bit on any
// device. Instantiated for double, float and __nv_bfloat16 tensors (sums in Compute<T>).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "kernels/element.cuh"

// Per-block partial sums written for each tensor; a constant, so that the reduction order
// does not depend on the device.
constexpr int kGlobalNormBlocks = 64;

// Elements of workspace that global_norm_squared needs for num_tensors tensors.
inline size_t global_norm_workspace_size(int num_tensors) { return size_t(num_tensors) * kGlobalNormBlocks; }

// tensor_sums[i] (num_tensors) = sum of tensors[i][j]^2 over its sizes[i] elements (=), and,
// unless total is null, *total (1) = the fixed-order sum of tensor_sums (=). tensors and sizes
// are host arrays of num_tensors entries; tensors[i] are device pointers. workspace holds
// global_norm_workspace_size(num_tensors) elements of the caller's. Saves nothing.
template <typename T>
void global_norm_squared(Compute<T>* tensor_sums, Compute<T>* total, Compute<T>* workspace,
                         const T* const* tensors, const size_t* sizes, int num_tensors, cudaStream_t stream);

// One tensor of global_norm_squared_of_table: elements [offset, offset + count) of the caller's
// base array, whose squared sum goes to out[slot]; it takes blocks [first_block, first_block +
// blocks) of the launch, as many as global_norm_squared gives a tensor of its size. A tensor not
// counted (a copy another rank counts, whose non-finite values the guard must still see) puts its
// sum times 0 in its slot: 0, or NaN when it is not finite.
struct NormTensor {
  size_t offset;
  size_t count;
  size_t slot;
  unsigned first_block;
  unsigned blocks;
  int counted;
};

// The table of tensors (offset, count, slot, counted: empty for all), blocks assigned in order;
// total_blocks (=) their sum.
std::vector<NormTensor> norm_tensor_table(const std::vector<size_t>& offsets, const std::vector<size_t>& counts,
                                          const std::vector<size_t>& slots, unsigned& total_blocks,
                                          const std::vector<int>& counted = {});

// The same sums as global_norm_squared over the table's tensors in two launches whatever their
// number, bitwise: out[table[i].slot] (=) = sum of base[table[i].offset + j]^2 over its count
// (times 0 when not counted),
// each tensor reduced by the same blocks in the same order. table (device, num_tensors entries,
// norm_tensor_table's), total_blocks its sum of blocks, workspace global_norm_workspace_size
// (num_tensors) elements. Other entries of out are left as they were.
template <typename T>
void global_norm_squared_of_table(Compute<T>* out, Compute<T>* workspace, const T* base, const NormTensor* table,
                                  int num_tensors, unsigned total_blocks, cudaStream_t stream);

// out[r] (rows) = sum of values[r, :] (rows, count) (=), in an order fixed by count alone; e.g.
// per-layer partial sums gathered from the ranks, in layer order, to their total.
// For float and double.
template <typename S>
void sum_rows_in_fixed_order(S* out, const S* values, size_t rows, size_t count, cudaStream_t stream);

// x (n) *= factor (=): clipping the gradient by scaling.
template <typename T>
void scale_tensor(T* x, size_t n, double factor, cudaStream_t stream);

// The clipping scale for a gradient of the given norm: min(1, max_norm / (norm + 1e-6)),
// the 1e-6 keeping it finite for a zero gradient.
__host__ __device__ inline double clip_factor(double norm, double max_norm) {
  const double factor = max_norm / (norm + 1e-6);
  return factor < 1.0 ? factor : 1.0;
}
