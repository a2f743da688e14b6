// The global gradient norm and clipping (kernels/global_norm.cuh): a grid of blocks sized
// by the tensor's length writes partial sums of squares, one block per tensor sums those,
// and one block sums the tensors; each reduction has an order fixed by the sizes alone.
#include "kernels/global_norm.cuh"

#include <algorithm>

#include "kernels/launch.cuh"
#include "kernels/warp_reduce.cuh"

namespace {

constexpr int kNormThreads = 512;
// Elements per thread before a second block is used: small tensors (biases, LayerNorm
// weights) take one block, not kGlobalNormBlocks mostly idle ones.
constexpr size_t kNormElementsPerThread = 16;
constexpr int kRowSumThreads = 256;
constexpr int kScaleThreads = 512;

// The sum of value over the block, valid in thread 0: a reduction within each warp, then
// thread 0 adds the warps' sums in warp order. Once per kernel (its shared memory is not
// reused, so no closing barrier).
template <typename S>
__device__ S block_sum(S value) {
  __shared__ S warp_sums[32];
  value = warp_sum(value);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  S sum = S(0);
  if (threadIdx.x == 0)
    for (int w = 0; w < int(blockDim.x / 32); ++w) sum += warp_sums[w];
  return sum;
}

// block_sums[blockIdx.x] (gridDim.x) = this block's share of sum x^2 over x (n): thread k of
// the grid takes elements k, k + gridDim.x blockDim.x, ...; block 0 also zeroes the entries
// [gridDim.x, kGlobalNormBlocks), so that the row sums to the tensor's total.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    squared_sum_blocks_kernel(Compute<T>* block_sums, const T* x, size_t n) {
  using C = Compute<T>;
  if (blockIdx.x == 0)
    for (unsigned b = gridDim.x + threadIdx.x; b < unsigned(kGlobalNormBlocks); b += blockDim.x) block_sums[b] = C(0);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  C sum = C(0);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const C value = to_compute(x[i]);
    sum += value * value;
  }
  const C block_total = block_sum(sum);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = block_total;
}

// squared_sum_blocks_kernel's work for every tensor of a table in one grid: global block b is
// block b - first_block of the tensor whose blocks hold it, as if launched alone with its blocks.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    squared_sum_table_kernel(Compute<T>* workspace, const T* base, const NormTensor* table, int num_tensors) {
  using C = Compute<T>;
  int low = 0, high = num_tensors - 1;  // the last tensor whose first block is at most blockIdx.x
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (table[middle].first_block <= blockIdx.x) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  const NormTensor& tensor = table[low];
  const unsigned block = blockIdx.x - tensor.first_block;
  C* block_sums = workspace + size_t(low) * kGlobalNormBlocks;
  if (block == 0)
    for (unsigned b = tensor.blocks + threadIdx.x; b < unsigned(kGlobalNormBlocks); b += blockDim.x)
      block_sums[b] = C(0);
  const T* x = base + tensor.offset;
  const size_t stride = size_t(tensor.blocks) * blockDim.x;
  C sum = C(0);
  for (size_t i = size_t(block) * blockDim.x + threadIdx.x; i < tensor.count; i += stride) {
    const C value = to_compute(x[i]);
    sum += value * value;
  }
  const C block_total = block_sum(sum);
  if (threadIdx.x == 0) block_sums[block] = block_total;
}

// sum_rows_kernel with row r's sum written to out[table[r].slot] (times 0 when not counted).
template <typename S>
__global__ void __launch_bounds__(kRowSumThreads)
    sum_rows_to_slots_kernel(S* out, const S* values, size_t count, const NormTensor* table) {
  const S* row = values + size_t(blockIdx.x) * count;
  S sum = S(0);
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) sum += row[i];
  const S row_total = block_sum(sum);
  if (threadIdx.x == 0) out[table[blockIdx.x].slot] = table[blockIdx.x].counted ? row_total : row_total * S(0);
}

// One block per row: out[row] = sum of values[row, :] (count).
template <typename S>
__global__ void __launch_bounds__(kRowSumThreads) sum_rows_kernel(S* out, const S* values, size_t count) {
  const S* row = values + size_t(blockIdx.x) * count;
  S sum = S(0);
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) sum += row[i];
  const S row_total = block_sum(sum);
  if (threadIdx.x == 0) out[blockIdx.x] = row_total;
}

template <typename T>
__global__ void __launch_bounds__(kScaleThreads) scale_kernel(T* x, size_t n, Compute<T> factor) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = from_compute<T>(to_compute(x[i]) * factor);
}

// The blocks global_norm_squared gives a tensor of n elements.
size_t norm_blocks(size_t n) {
  const size_t per_block = kNormThreads * kNormElementsPerThread;
  return std::clamp<size_t>((n + per_block - 1) / per_block, 1, kGlobalNormBlocks);
}

}  // namespace

// ---- launchers ----

std::vector<NormTensor> norm_tensor_table(const std::vector<size_t>& offsets, const std::vector<size_t>& counts,
                                          const std::vector<size_t>& slots, unsigned& total_blocks,
                                          const std::vector<int>& counted) {
  std::vector<NormTensor> table;
  total_blocks = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const unsigned blocks = unsigned(norm_blocks(counts[i]));
    table.push_back({offsets[i], counts[i], slots[i], total_blocks, blocks, counted.empty() ? 1 : counted[i]});
    total_blocks += blocks;
  }
  return table;
}

template <typename T>
void global_norm_squared_of_table(Compute<T>* out, Compute<T>* workspace, const T* base, const NormTensor* table,
                                  int num_tensors, unsigned total_blocks, cudaStream_t stream) {
  if (num_tensors <= 0) return;
  launch(squared_sum_table_kernel<T>, dim3(total_blocks), dim3(kNormThreads), 0, stream, workspace, base, table,
         num_tensors);
  launch(sum_rows_to_slots_kernel<Compute<T>>, dim3(unsigned(num_tensors)), dim3(kRowSumThreads), 0, stream, out,
         static_cast<const Compute<T>*>(workspace), size_t(kGlobalNormBlocks), table);
}

template <typename T>
void global_norm_squared(Compute<T>* tensor_sums, Compute<T>* total, Compute<T>* workspace,
                         const T* const* tensors, const size_t* sizes, int num_tensors, cudaStream_t stream) {
  if (num_tensors <= 0) return;
  for (int i = 0; i < num_tensors; ++i) {
    const size_t blocks = norm_blocks(sizes[i]);
    launch(squared_sum_blocks_kernel<T>, dim3(unsigned(blocks)), dim3(kNormThreads), 0, stream,
           workspace + size_t(i) * kGlobalNormBlocks, tensors[i], sizes[i]);
  }
  sum_rows_in_fixed_order(tensor_sums, static_cast<const Compute<T>*>(workspace), size_t(num_tensors),
                          size_t(kGlobalNormBlocks), stream);
  if (total != nullptr)
    sum_rows_in_fixed_order(total, static_cast<const Compute<T>*>(tensor_sums), 1, size_t(num_tensors), stream);
}

template <typename S>
void sum_rows_in_fixed_order(S* out, const S* values, size_t rows, size_t count, cudaStream_t stream) {
  if (rows == 0) return;
  launch(sum_rows_kernel<S>, dim3(unsigned(rows)), dim3(kRowSumThreads), 0, stream, out, values, count);
}

template <typename T>
void scale_tensor(T* x, size_t n, double factor, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = (n + kScaleThreads - 1) / kScaleThreads;
  launch(scale_kernel<T>, dim3(unsigned(blocks)), dim3(kScaleThreads), 0, stream, x, n, Compute<T>(factor));
}

template void global_norm_squared<double>(double*, double*, double*, const double* const*, const size_t*, int,
                                          cudaStream_t);
template void global_norm_squared<float>(float*, float*, float*, const float* const*, const size_t*, int,
                                         cudaStream_t);
template void global_norm_squared<__nv_bfloat16>(float*, float*, float*, const __nv_bfloat16* const*,
                                                 const size_t*, int, cudaStream_t);
template void global_norm_squared_of_table<double>(double*, double*, const double*, const NormTensor*, int, unsigned,
                                                   cudaStream_t);
template void global_norm_squared_of_table<float>(float*, float*, const float*, const NormTensor*, int, unsigned,
                                                  cudaStream_t);
template void global_norm_squared_of_table<__nv_bfloat16>(float*, float*, const __nv_bfloat16*, const NormTensor*,
                                                          int, unsigned, cudaStream_t);
template void sum_rows_in_fixed_order<double>(double*, const double*, size_t, size_t, cudaStream_t);
template void sum_rows_in_fixed_order<float>(float*, const float*, size_t, size_t, cudaStream_t);
template void scale_tensor<double>(double*, size_t, double, cudaStream_t);
template void scale_tensor<float>(float*, size_t, double, cudaStream_t);
template void scale_tensor<__nv_bfloat16>(__nv_bfloat16*, size_t, double, cudaStream_t);
