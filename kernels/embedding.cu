// Token and position embedding (see kernels/embedding.cuh): the forward gather, then
// the deterministic backward: order the positions by token, sum each token's run of
// positions in order; sum each position's gradients over the batch in order.
#include "kernels/embedding.cuh"

#include <cstdio>
#include <cstdlib>

#include "kernels/element.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int kElementThreads = 256;
// The forward: a block writes kForwardRows rows, its threads consecutive channels.
constexpr int kForwardThreads = 128;
constexpr int kForwardRows = 8;
constexpr int kMaxGridY = 65535;
constexpr int kOrderThreads = 256;
constexpr int kRunThreads = 128;  // channels of one token's run; GPT-2's C = 768 is 6 per thread

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

// order[rank] = position for the count positions of tokens (B T), ranked by (token,
// position): a position's rank counts the positions with a smaller token or with the same
// token earlier. The keys are distinct, so the order is unique, whatever the scheduling.
// Each block compares its positions against tiles of tokens staged in shared memory: the
// O(count^2) comparisons are cheap next to the layer's products (B T = 8192 for GPT-2).
__global__ void order_positions_by_token_kernel(int* order, const int* tokens, int count) {
  __shared__ int tile[kOrderThreads];
  const int position = blockIdx.x * blockDim.x + threadIdx.x;
  const int token = position < count ? tokens[position] : 0;
  int rank = 0;
  for (int start = 0; start < count; start += kOrderThreads) {
    __syncthreads();  // everyone is done with the previous tile
    if (start + int(threadIdx.x) < count) tile[threadIdx.x] = tokens[start + threadIdx.x];
    __syncthreads();
    const int tile_size = count - start < kOrderThreads ? count - start : kOrderThreads;
    for (int k = 0; k < tile_size; ++k) rank += tile[k] < token || (tile[k] == token && start + k < position);
  }
  if (position < count) order[rank] = position;
}

// One block per slot of order: a block whose slot starts a run of equal tokens v adds
// dout's rows at the run's positions, in position order, to dwte[v, :]; the other blocks
// have nothing to do. Threads take channels, so each row of dout is read coalesced.
template <typename Element>
__global__ void token_gradient_kernel(Element* dwte, const Element* dout, const int* order, const int* tokens,
                                      int count, int C) {
  using Real = Compute<Element>;
  const int slot = blockIdx.x;
  const int token = tokens[order[slot]];
  if (slot == 0 || tokens[order[slot - 1]] != token) {
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      Real sum = 0;
      for (int s = slot; s < count && tokens[order[s]] == token; ++s) sum += to_compute(dout[size_t(order[s]) * C + c]);
      Element* gradient = dwte + size_t(token) * C + c;
      *gradient = from_compute<Element>(to_compute(*gradient) + sum);
    }
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

size_t embedding_backward_workspace_size(int B, int T) { return size_t(B) * T; }

template <typename Element>
void embedding_backward(Element* dwte, Element* dwpe, int* workspace, const Element* dout, const int* tokens, int B,
                        int T, int C, cudaStream_t stream) {
  const int positions = B * T;
  int* order = workspace;  // (B T) positions ordered by (token, position)
  launch(order_positions_by_token_kernel, dim3(blocks_for(positions, kOrderThreads)), dim3(kOrderThreads), 0, stream,
         order, tokens, positions);
  launch(token_gradient_kernel<Element>, dim3(positions), dim3(kRunThreads), 0, stream, dwte, dout,
         order, tokens, positions, C);
  launch(position_gradient_kernel<Element>, dim3(blocks_for(size_t(T) * C, kElementThreads)), dim3(kElementThreads),
         0, stream, dwpe, dout, B, T, C);
}

#define INSTANTIATE_EMBEDDING(Element)                                                                          \
  template void embedding_forward<Element>(Element*, const int*, const Element*, const Element*, int, int, int, \
                                           cudaStream_t);                                                       \
  template void embedding_backward<Element>(Element*, Element*, int*, const Element*, const int*, int, int, int, \
                                            cudaStream_t);
INSTANTIATE_EMBEDDING(double)
INSTANTIATE_EMBEDDING(float)
INSTANTIATE_EMBEDDING(__nv_bfloat16)
