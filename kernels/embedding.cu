// Token and position embedding (see kernels/embedding.cuh): the forward gather, then
// the deterministic backward, in four steps:
//   1. sort the keys (token << 32 | position) of the B T positions: each tile of 256
//      keys by counting, then merges of sorted neighbours (merge path), log2(B T / 256)
//      passes. The keys are distinct, so the sorted order is unique: no stability or
//      scheduling question arises, and a token's positions lie together in position order.
//   2. cut each token's run of positions into segments of kEmbeddingSegment from its
//      start, and sum each segment per channel in position order. A run of one segment
//      (every run of the default model's 512 positions) adds its sum to dwte here.
//   3. add the segment sums of the longer runs in order, and that total to dwte.
//   4. sum each position's gradient over the batch into dwpe.
// The cost is O(n log n) for the sort of n = B T keys and O(n C) for the sums, whose
// longest serial chain is kEmbeddingSegment + n / kEmbeddingSegment additions.
#include "kernels/embedding.cuh"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "kernels/element.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int kElementThreads = 256;  // the position gradient, one thread per element
constexpr int kMaxGridY = 65535;
// The forward: a block writes kForwardRows rows, its threads consecutive channels.
constexpr int kForwardThreads = 128;
constexpr int kForwardRows = 8;
// The sort: tiles of kSortTile keys sorted by counting, one thread per key, then merges in
// which a thread writes kMergeItems outputs (dividing every merged pair's size).
using Key = unsigned long long;  // token << 32 | position
constexpr Key kNoKey = ~Key(0);  // after every key: tokens are below 2^31
constexpr int kSortTile = 256;
constexpr int kMergeItems = 8;
constexpr int kMergeThreads = 256;
// The sums: a block takes the segments starting in a window of kWindow sorted keys, for
// kChannelThreads channels, one a thread.
constexpr int kWindow = 32;
constexpr int kChannelThreads = 128;

// out[b, t, c] = wte[tokens[b, t], c] + wpe[t, c]. Block (x, b) writes the rows (b, t) of
// the kForwardRows positions t from x kForwardRows, its threads consecutive channels, so
// the gathers from wte and wpe and the stores are coalesced row segments, and no index is
// divided.
template <typename Element>
__global__ void embedding_forward_kernel(Element* out, const int* tokens, const Element* wte, const Element* wpe,
                                         int T, int C) {
  const int b = blockIdx.y, first = blockIdx.x * kForwardRows;
  const int end = T - first < kForwardRows ? T : first + kForwardRows;
  for (int t = first; t < end; ++t) {
    const size_t position = size_t(b) * T + t;
    const Element* token_row = wte + size_t(tokens[position]) * C;
    const Element* position_row = wpe + size_t(t) * C;
    Element* out_row = out + position * C;
    for (int c = threadIdx.x; c < C; c += kForwardThreads)
      out_row[c] = from_compute<Element>(to_compute(token_row[c]) + to_compute(position_row[c]));
  }
}

__device__ inline Key key_of(int token, int position) { return Key(unsigned(token)) << 32 | unsigned(position); }
__device__ inline int token_of(Key key) { return int(key >> 32); }
__device__ inline int position_of(Key key) { return int(key & 0xffffffffu); }

// Each block sorts the keys of positions [x kSortTile, (x + 1) kSortTile) into the same
// slots of sorted: a key's slot is the number of smaller keys in its tile (distinct keys).
__global__ void sort_tiles_kernel(Key* sorted, const int* tokens, int count) {
  __shared__ Key tile[kSortTile];
  const int first = blockIdx.x * kSortTile, position = first + threadIdx.x;
  const Key key = position < count ? key_of(tokens[position], position) : kNoKey;
  tile[threadIdx.x] = key;
  __syncthreads();
  if (position < count) {
    int rank = 0;
    for (int k = 0; k < kSortTile; ++k) rank += tile[k] < key;
    sorted[first + rank] = key;
  }
}

// out = in with each pair of sorted neighbours in[start, start + width) and
// in[start + width, start + 2 width) merged (start a multiple of 2 width; the last pair
// may be short). Each thread writes kMergeItems consecutive outputs: it finds how many of
// the first ones come from the left neighbour by a binary search along its diagonal of
// the merge (merge path), then merges from there.
__global__ void merge_pairs_kernel(Key* out, const Key* in, int count, int width) {
  const size_t first = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kMergeItems;
  if (first >= size_t(count)) return;
  const size_t pair = 2 * size_t(width), start = first & ~(pair - 1);  // pair is a power of two
  const size_t middle = start + width < size_t(count) ? start + width : count;
  const size_t end = start + pair < size_t(count) ? start + pair : count;
  const Key* left = in + start;
  const Key* right = in + middle;
  const size_t left_count = middle - start, right_count = end - middle, diagonal = first - start;
  // The outputs before out[first] take i keys from the left and diagonal - i from the
  // right: i is the least with left[i] after right[diagonal - i - 1].
  size_t low = diagonal > right_count ? diagonal - right_count : 0, high = diagonal < left_count ? diagonal : left_count;
  while (low < high) {
    const size_t i = (low + high) / 2;
    if (left[i] < right[diagonal - i - 1]) low = i + 1;
    else high = i;
  }
  size_t i = low, j = diagonal - low;
  const size_t last = first + kMergeItems < end ? first + kMergeItems : end;
  for (size_t k = first; k < last; ++k)
    out[k] = j == right_count || (i < left_count && left[i] < right[j]) ? left[i++] : right[j++];
}

// The first slot of the run of equal tokens that slot lies in.
__device__ int run_start_of(const Key* sorted, int slot) {
  const int token = token_of(sorted[slot]);
  int low = 0, high = slot;
  while (low < high) {
    const int middle = low + (high - low) / 2;
    if (token_of(sorted[middle]) < token) low = middle + 1;
    else high = middle;
  }
  return low;
}

// The row of partials that holds the sum of the segment starting at slot, in a run
// longer than one segment. Two such segments that start within kEmbeddingSegment slots
// of each other are the short last segment of one run and the first of the next, so
// the bit for "first segment" keeps the rows apart: 2 ceil(count / kEmbeddingSegment) rows.
__device__ inline size_t partial_row(int slot, bool first_segment) {
  return 2 * size_t(slot / kEmbeddingSegment) + first_segment;
}

// The rows of wte whose gradient a backward writes: tokens [first, first + count); dwte points
// at row first. Other tokens' positions add nothing (a tensor-parallel rank's slice of wte).
struct TokenRows {
  int first, count;
  __device__ bool holds(int token) const { return unsigned(token - first) < unsigned(count); }
};

// Block (x, y) sums, for channel y kChannelThreads + threadIdx.x, the segments that start
// in slots [x kWindow, (x + 1) kWindow) of the sorted keys: each from 0, in position
// order. A run of one segment adds its sum to dwte; a longer run's segments go to
// partials. Every thread of a block reads the same keys, so the walk is uniform.
template <typename Element>
__global__ void segment_sums_kernel(Element* dwte, Compute<Element>* partials, const Key* sorted,
                                    const Element* dout, int count, int C, TokenRows rows) {
  using Real = Compute<Element>;
  const int c = blockIdx.y * kChannelThreads + threadIdx.x;
  if (c >= C) return;
  const int first = blockIdx.x * kWindow, end = count - first < kWindow ? count : first + kWindow;
  int run_start = run_start_of(sorted, first);
  for (int slot = first; slot < end; ++slot) {
    const int token = token_of(sorted[slot]);
    if (token_of(sorted[run_start]) != token) run_start = slot;
    if ((slot - run_start) % kEmbeddingSegment != 0) continue;  // inside a segment
    if (!rows.holds(token)) continue;
    int segment_end = slot + 1;
    while (segment_end < count && segment_end - slot < kEmbeddingSegment && token_of(sorted[segment_end]) == token)
      ++segment_end;
    Real sum = 0;
    for (int s = slot; s < segment_end; ++s) sum += to_compute(dout[size_t(position_of(sorted[s])) * C + c]);
    const bool whole_run = slot == run_start && (segment_end == count || token_of(sorted[segment_end]) != token);
    if (whole_run) {
      Element* gradient = dwte + size_t(token - rows.first) * C + c;
      *gradient = from_compute<Element>(to_compute(*gradient) + sum);
    } else {
      partials[partial_row(slot, slot == run_start) * C + c] = sum;
    }
  }
}

// Block (x, y), for channel y kChannelThreads + threadIdx.x: each run longer than one
// segment that starts in slots [x kWindow, (x + 1) kWindow) adds its segments' sums in
// order and that total to dwte.
template <typename Element>
__global__ void long_run_totals_kernel(Element* dwte, const Compute<Element>* partials, const Key* sorted, int count,
                                       int C, TokenRows rows) {
  using Real = Compute<Element>;
  const int c = blockIdx.y * kChannelThreads + threadIdx.x;
  if (c >= C) return;
  const int first = blockIdx.x * kWindow, end = count - first < kWindow ? count : first + kWindow;
  for (int slot = first; slot < end; ++slot) {
    const int token = token_of(sorted[slot]);
    const bool starts_run = slot == 0 || token_of(sorted[slot - 1]) != token;
    const bool long_run = slot + kEmbeddingSegment < count && token_of(sorted[slot + kEmbeddingSegment]) == token;
    if (!starts_run || !long_run || !rows.holds(token)) continue;
    Real total = partials[partial_row(slot, true) * C + c];
    for (int s = slot + kEmbeddingSegment; s < count && token_of(sorted[s]) == token; s += kEmbeddingSegment)
      total += partials[partial_row(s, false) * C + c];
    Element* gradient = dwte + size_t(token - rows.first) * C + c;
    *gradient = from_compute<Element>(to_compute(*gradient) + total);
  }
}

// dwpe[t, c] += sum over b of dout[b, t, c], in order of b; one thread per element of (T, C).
template <typename Element>
__global__ void position_gradient_kernel(Element* dwpe, const Element* dout, int B, int T, int C) {
  using Real = Compute<Element>;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t per_sequence = size_t(T) * C;
  if (i < per_sequence) {
    Real sum = 0;
    for (int b = 0; b < B; ++b) sum += to_compute(dout[b * per_sequence + i]);
    dwpe[i] = from_compute<Element>(to_compute(dwpe[i]) + sum);
  }
}

unsigned blocks_for(size_t count, int threads) { return unsigned((count + threads - 1) / threads); }

// Rows of segment sums for count positions (see partial_row).
size_t partial_rows(int count) { return 2 * blocks_for(count, kEmbeddingSegment); }

}  // namespace

// ---- launchers ----

template <typename Element>
void embedding_forward(Element* out, const int* tokens, const Element* wte, const Element* wpe, int B, int T, int C,
                       cudaStream_t stream) {
  if (B > kMaxGridY) {
    std::fprintf(stderr, "embedding: B = %d sequences exceed the %d blocks a grid's y dimension allows\n", B,
                 kMaxGridY);
    std::exit(EXIT_FAILURE);
  }
  launch(embedding_forward_kernel<Element>, dim3(blocks_for(T, kForwardRows), B), dim3(kForwardThreads), 0, stream,
         out, tokens, wte, wpe, T, C);
}

size_t embedding_backward_workspace_size(int B, int T, int C) {
  const size_t ints_per_double = sizeof(double) / sizeof(int), ints_per_key = sizeof(Key) / sizeof(int);
  return 2 * size_t(B) * T * ints_per_key + partial_rows(B * T) * C * ints_per_double;
}

template <typename Element>
void embedding_backward(Element* dwte, Element* dwpe, int* workspace, const Element* dout, const int* tokens, int B,
                        int T, int C, cudaStream_t stream) {
  embedding_backward_rows(dwte, 0, INT_MAX, dwpe, workspace, dout, tokens, B, T, C, stream);
}

template <typename Element>
void embedding_backward_rows(Element* dwte_rows, int first_token, int rows, Element* dwpe, int* workspace,
                             const Element* dout, const int* tokens, int B, int T, int C, cudaStream_t stream) {
  const TokenRows held{first_token, rows};
  const int count = B * T;
  Key* keys = reinterpret_cast<Key*>(workspace);
  Key* sorted = keys;          // (B T)
  Key* spare = keys + count;   // (B T)
  auto* partials = reinterpret_cast<Compute<Element>*>(keys + 2 * size_t(count));  // (partial_rows, C)
  launch(sort_tiles_kernel, dim3(blocks_for(count, kSortTile)), dim3(kSortTile), 0, stream, sorted, tokens, count);
  for (size_t width = kSortTile; width < size_t(count); width *= 2) {
    launch(merge_pairs_kernel, dim3(blocks_for(blocks_for(count, kMergeItems), kMergeThreads)), dim3(kMergeThreads), 0,
           stream, spare, sorted, count, int(width));
    std::swap(sorted, spare);
  }
  const dim3 windows(blocks_for(count, kWindow), blocks_for(C, kChannelThreads));
  launch(segment_sums_kernel<Element>, windows, dim3(kChannelThreads), 0, stream, dwte_rows, partials, sorted, dout,
         count, C, held);
  if (count > kEmbeddingSegment)  // else no run is longer than a segment
    launch(long_run_totals_kernel<Element>, windows, dim3(kChannelThreads), 0, stream, dwte_rows, partials, sorted,
           count, C, held);
  launch(position_gradient_kernel<Element>, dim3(blocks_for(size_t(T) * C, kElementThreads)), dim3(kElementThreads),
         0, stream, dwpe, dout, B, T, C);
}

#define INSTANTIATE_EMBEDDING(Element)                                                                          \
  template void embedding_forward<Element>(Element*, const int*, const Element*, const Element*, int, int, int, \
                                           cudaStream_t);                                                       \
  template void embedding_backward<Element>(Element*, Element*, int*, const Element*, const int*, int, int, int, \
                                            cudaStream_t);                                                       \
  template void embedding_backward_rows<Element>(Element*, int, int, Element*, int*, const Element*, const int*, \
                                                 int, int, int, cudaStream_t);
INSTANTIATE_EMBEDDING(double)
INSTANTIATE_EMBEDDING(float)
INSTANTIATE_EMBEDDING(__nv_bfloat16)
