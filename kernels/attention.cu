// Causal multi-head self-attention (see kernels/attention.cuh): the head permutations
// and the causal softmax with its backward, then the launchers, which run the
// per-head products as cuBLAS strided batches over the B * NH heads.
#include "kernels/attention.cuh"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/element.cuh"
#include "kernels/exponential.cuh"
#include "kernels/gemm.cuh"
#include "kernels/launch.cuh"
#include "kernels/warp_reduce.cuh"

namespace {

// A permutation block moves kPermuteRows rows (b, t) of one part; its kHeadRows warps
// take heads, a warp's kHeadLanes lanes a head's channels.
constexpr int kHeadLanes = 32;
constexpr int kHeadRows = 4;
constexpr int kPermuteThreads = kHeadLanes * kHeadRows;
constexpr int kPermuteRows = 8;
constexpr int kMaxGridY = 65535;
constexpr int kWarpSize = 32;
constexpr int kSoftmaxThreads = 256;  // 8 warps, one row each
constexpr int kSoftmaxRowsPerBlock = kSoftmaxThreads / kWarpSize;

// out (parts, B, NH, T, HS) from inp (B, T, parts, NH, HS): splits rows of parts * C
// channels into per-head matrices. Block (x, b, p) moves part p of rows (b, t) for the
// kPermuteRows positions t from x kPermuteRows: lane l of warp w takes channels l, l + 32,
// ... of heads w, w + 4, ..., so both sides are accessed in runs of HS, and no index is
// divided (the grid and the loops give b, p, t, h and d).
template <typename Element>
__global__ void split_heads_kernel(Element* out, const Element* inp, int B, int T, int parts, int NH, int HS) {
  const int b = blockIdx.y, p = blockIdx.z, first = blockIdx.x * kPermuteRows;
  const int end = T - first < kPermuteRows ? T : first + kPermuteRows;
  const int lane = threadIdx.x % kHeadLanes, warp = threadIdx.x / kHeadLanes;
  for (int t = first; t < end; ++t) {
    const Element* row = inp + ((size_t(b) * T + t) * parts + p) * NH * HS;  // (NH, HS)
    for (int h = warp; h < NH; h += kHeadRows) {
      Element* head_row = out + (((size_t(p) * B + b) * NH + h) * T + t) * HS;  // (HS)
      for (int d = lane; d < HS; d += kHeadLanes) head_row[d] = row[h * HS + d];
    }
  }
}

// out (B, T, parts, NH, HS) from inp (parts, B, NH, T, HS): the inverse of split_heads,
// with the same blocks and threads.
template <typename Element>
__global__ void merge_heads_kernel(Element* out, const Element* inp, int B, int T, int parts, int NH, int HS) {
  const int b = blockIdx.y, p = blockIdx.z, first = blockIdx.x * kPermuteRows;
  const int end = T - first < kPermuteRows ? T : first + kPermuteRows;
  const int lane = threadIdx.x % kHeadLanes, warp = threadIdx.x / kHeadLanes;
  for (int t = first; t < end; ++t) {
    Element* row = out + ((size_t(b) * T + t) * parts + p) * NH * HS;  // (NH, HS)
    for (int h = warp; h < NH; h += kHeadRows) {
      const Element* head_row = inp + (((size_t(p) * B + b) * NH + h) * T + t) * HS;  // (HS)
      for (int d = lane; d < HS; d += kHeadLanes) row[h * HS + d] = head_row[d];
    }
  }
}

// In place on att (B * NH * T rows, T): row t of each head's (T, T) block goes from
// q_t . k_j to softmax over j <= t of scale * q_t . k_j, and 0 for j > t. One warp per
// row; lane l handles columns l, l + 32, ..., so no lane reads another's columns.
template <typename Element>
__global__ void causal_softmax_forward_kernel(Element* att, size_t rows, int T, Compute<Element> scale) {
  using Real = Compute<Element>;
  const size_t row = size_t(blockIdx.x) * kSoftmaxRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row < rows) {  // the same for the whole warp, so every shuffle has all its lanes
    Element* logits = att + row * T;
    const int t = int(row % T);
    Real max_logit = scale * to_compute(logits[0]);  // column 0 is never masked
    for (int j = lane; j <= t; j += kWarpSize) {
      const Real logit = scale * to_compute(logits[j]);
      max_logit = logit > max_logit ? logit : max_logit;
    }
    max_logit = warp_max(max_logit);
    Real sum = 0;
    for (int j = lane; j <= t; j += kWarpSize) sum += exponential(scale * to_compute(logits[j]) - max_logit);
    const Real inverse_sum = 1 / warp_sum(sum);
    for (int j = lane; j < T; j += kWarpSize) {
      const Real probability = j <= t ? exponential(scale * to_compute(logits[j]) - max_logit) * inverse_sum : 0;
      logits[j] = from_compute<Element>(probability);
    }
  }
}

// In place on datt (B * NH * T rows, T): from d loss / d probability to d loss / d (q_t . k_j)
// = scale * p_j (datt_j - sum_i p_i datt_i) for j <= t, 0 for j > t; att holds the
// probabilities p. One warp per row, columns split among lanes as in the forward.
template <typename Element>
__global__ void causal_softmax_backward_kernel(Element* datt, const Element* att, size_t rows, int T,
                                               Compute<Element> scale) {
  using Real = Compute<Element>;
  const size_t row = size_t(blockIdx.x) * kSoftmaxRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row < rows) {  // the same for the whole warp, so every shuffle has all its lanes
    Element* gradient = datt + row * T;
    const Element* probabilities = att + row * T;
    const int t = int(row % T);
    Real dot = 0;
    for (int j = lane; j <= t; j += kWarpSize) dot += to_compute(probabilities[j]) * to_compute(gradient[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += kWarpSize) {
      const Real g = j <= t ? scale * to_compute(probabilities[j]) * (to_compute(gradient[j]) - dot) : 0;
      gradient[j] = from_compute<Element>(g);
    }
  }
}

void require_whole_heads(int C, int NH) {
  if (NH > 0 && C % NH == 0) return;
  std::fprintf(stderr, "attention: C = %d channels do not split into NH = %d heads of equal size\n", C, NH);
  std::exit(EXIT_FAILURE);
}

unsigned blocks_for(size_t count, int threads) { return unsigned((count + threads - 1) / threads); }

// The permutations' grid: a block per kPermuteRows positions of a sequence and part. CUDA
// limits gridDim.y to 65535.
dim3 permute_grid(int B, int T, int parts) {
  if (B > kMaxGridY) {
    std::fprintf(stderr, "attention: B = %d sequences exceed the %d blocks a grid's y dimension allows\n", B, kMaxGridY);
    std::exit(EXIT_FAILURE);
  }
  return dim3(blocks_for(T, kPermuteRows), B, parts);
}

template <typename Element>
void split_heads(Element* out, const Element* inp, int B, int T, int parts, int NH, int HS, cudaStream_t stream) {
  launch(split_heads_kernel<Element>, permute_grid(B, T, parts), dim3(kPermuteThreads), 0, stream, out, inp, B,
         T, parts, NH, HS);
}
template <typename Element>
void merge_heads(Element* out, const Element* inp, int B, int T, int parts, int NH, int HS, cudaStream_t stream) {
  launch(merge_heads_kernel<Element>, permute_grid(B, T, parts), dim3(kPermuteThreads), 0, stream, out, inp, B,
         T, parts, NH, HS);
}

}  // namespace

// ---- launchers ----

size_t attention_saved_size(int B, int T, int C, int NH) {
  return 3 * size_t(B) * T * C + size_t(B) * NH * T * T;
}
size_t attention_forward_scratch_size(int B, int T, int C, int NH) { return size_t(B) * T * C; }
size_t attention_backward_scratch_size(int B, int T, int C, int NH) {
  return 3 * size_t(B) * T * C + size_t(B) * NH * T * T;
}

template <typename Element>
void attention_forward(cublasHandle_t cublas, Element* out, Element* saved, Element* scratch, const Element* inp,
                       int B, int T, int C, int NH, cudaStream_t stream) {
  require_whole_heads(C, NH);
  const int HS = C / NH;
  const size_t per_part = size_t(B) * T * C;
  const long long head = (long long)T * HS, square = (long long)T * T;  // matrix strides between heads
  Element* q = saved;                  // (B, NH, T, HS)
  Element* k = q + per_part;           // (B, NH, T, HS)
  Element* v = k + per_part;           // (B, NH, T, HS)
  Element* att = v + per_part;         // (B, NH, T, T)
  Element* heads_out = scratch;        // (B, NH, T, HS)
  using Real = Compute<Element>;

  split_heads(q, inp, B, T, 3, NH, HS, stream);
  gemm_batched<Element>(cublas, false, true, T, T, HS, 1, q, head, k, head, 0, att, square, B * NH, stream);
  const size_t rows = size_t(B) * NH * T;
  launch(causal_softmax_forward_kernel<Element>, dim3(blocks_for(rows, kSoftmaxRowsPerBlock)), dim3(kSoftmaxThreads),
         0, stream, att, rows, T, Real(1 / std::sqrt(Real(HS))));
  gemm_batched<Element>(cublas, false, false, T, HS, T, 1, att, square, v, head, 0, heads_out, head, B * NH, stream);
  merge_heads(out, heads_out, B, T, 1, NH, HS, stream);
}

template <typename Element>
void attention_backward(cublasHandle_t cublas, Element* dinp, Element* scratch, const Element* dout,
                        const Element* saved, int B, int T, int C, int NH, cudaStream_t stream) {
  require_whole_heads(C, NH);
  const int HS = C / NH;
  const size_t per_part = size_t(B) * T * C;
  const long long head = (long long)T * HS, square = (long long)T * T;  // matrix strides between heads
  const Element* q = saved;            // (B, NH, T, HS)
  const Element* k = q + per_part;     // (B, NH, T, HS)
  const Element* v = k + per_part;     // (B, NH, T, HS)
  const Element* att = v + per_part;   // (B, NH, T, T)
  Element* dq = scratch;               // (B, NH, T, HS)
  Element* dk = dq + per_part;         // (B, NH, T, HS)
  Element* dv = dk + per_part;         // (B, NH, T, HS)
  Element* datt = dv + per_part;       // (B, NH, T, T)
  // dout split per head lives in dq's place: its last reader, dv's product, runs before dq is written.
  Element* dheads_out = dq;            // (B, NH, T, HS)
  using Real = Compute<Element>;

  split_heads(dheads_out, dout, B, T, 1, NH, HS, stream);
  gemm_batched<Element>(cublas, false, true, T, T, HS, 1, dheads_out, head, v, head, 0, datt, square, B * NH, stream);
  gemm_batched<Element>(cublas, true, false, T, HS, T, 1, att, square, dheads_out, head, 0, dv, head, B * NH, stream);
  const size_t rows = size_t(B) * NH * T;
  launch(causal_softmax_backward_kernel<Element>, dim3(blocks_for(rows, kSoftmaxRowsPerBlock)),
         dim3(kSoftmaxThreads), 0, stream, datt, att, rows, T, Real(1 / std::sqrt(Real(HS))));
  gemm_batched<Element>(cublas, false, false, T, HS, T, 1, datt, square, k, head, 0, dq, head, B * NH, stream);
  gemm_batched<Element>(cublas, true, false, T, HS, T, 1, datt, square, q, head, 0, dk, head, B * NH, stream);
  merge_heads(dinp, dq, B, T, 3, NH, HS, stream);
}

#define INSTANTIATE_ATTENTION(Element)                                                                         \
  template void attention_forward<Element>(cublasHandle_t, Element*, Element*, Element*, const Element*, int, int, \
                                           int, int, cudaStream_t);                                             \
  template void attention_backward<Element>(cublasHandle_t, Element*, Element*, const Element*, const Element*,   \
                                            int, int, int, int, cudaStream_t);
INSTANTIATE_ATTENTION(double)
INSTANTIATE_ATTENTION(float)
INSTANTIATE_ATTENTION(__nv_bfloat16)
