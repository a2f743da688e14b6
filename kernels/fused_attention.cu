// Fused causal attention (see kernels/fused_attention.cuh): the forward with the online softmax,
// the backward's three kernels (D, then dK and dV per key tile, then dQ per query tile), then
// the launchers. docs/kernels.md, "Fused attention", says why the rescale makes it exact.
//
// Every kernel has one block per (tile, head). A tile's rows (queries, or keys in dK/dV's kernel)
// are owned by threads: G = HS / 16 threads per row, thread g of a row holding channels
// [16 g, 16 g + 16) of the row's accumulators in registers, and computing the row's scores
// against keys (or queries) g, g + G, ... of the other tile. So no score is reduced across
// threads: the row's maximum and sum are read back from shared memory by each of its G
// threads, in the same order, giving the same bits. Barriers separate the phases of a tile
// (load, scores, probabilities, accumulation); there are no warp collectives, which the CPU
// build pays a fiber switch per lane for.
#include "kernels/fused_attention.cuh"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/element.cuh"
#include "kernels/exponential.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int kChannels = 16;  // accumulator channels per thread: HS must be a multiple
constexpr int kMaxHeadSize = 128;  // the tiles below keep shared memory within 48 KB up to it
constexpr int kMaxGridY = 65535;
constexpr int kRowThreads = 256;  // D's kernel: one thread per row

// Tile rows. The forward takes query tiles of `queries` rows against key tiles of `keys`; the
// backward's kernels both tiles of `backward` rows. Chosen so that every kernel's shared memory
// stays under the default 48 KB at HS = 128: double's tiles are half of float's.
template <typename Real> struct Tiles;
template <> struct Tiles<float> { static constexpr int queries = 32, keys = 16, backward = 16; };
template <> struct Tiles<double> { static constexpr int queries = 16, keys = 8, backward = 8; };

__device__ inline float logarithm(float x) { return logf(x); }
__device__ inline double logarithm(double x) { return log(x); }

__device__ __host__ inline int smaller(int a, int b) { return a < b ? a : b; }

// Copies the HS channels of rows [first, first + rows) of a head, src's row t at src + t
// row_stride, into tile (rows, HS + 1) as Real, by all the block's threads. Rows at or past T are
// not written: no thread reads them. The row padding of one value spreads a warp's reads of a
// column over the banks.
template <typename Element, typename Real>
__device__ void load_rows(Real* tile, const Element* src, size_t row_stride, int first, int rows, int T, int HS) {
  const int count = smaller(rows, T - first) * HS;
  // Element i = r HS + d, stepped by blockDim.x as (row, channel) steps: no division per element.
  const int row_step = blockDim.x / HS, channel_step = blockDim.x % HS;
  int r = threadIdx.x / HS, d = threadIdx.x % HS;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    tile[r * (HS + 1) + d] = to_compute(src[size_t(first + r) * row_stride + d]);
    r += row_step;
    d += channel_step;
    if (d >= HS) {
      d -= HS;
      ++r;
    }
  }
}

// Σ_d a[d] b[d] over a head's channels, in order.
template <typename Real>
__device__ inline Real dot(const Real* a, const Real* b, int HS) {
  Real sum = 0;
  for (int d = 0; d < HS; ++d) sum += a[d] * b[d];
  return sum;
}

// Calls use(j, dot(a, rows + j stride, HS)) for j = first, first + step, ... below end, in that
// order. Four rows' sums are run side by side, each over d in order (the bits of one at a time):
// a CPU then overlaps four chains of dependent additions where one chain leaves it waiting.
template <typename Real, typename Use>
__device__ inline void dots_with_rows(const Real* a, const Real* rows, int stride, int first, int step, int end,
                                      int HS, Use use) {
  int j = first;
  for (; j + 3 * step < end; j += 4 * step) {
    const Real* b0 = rows + j * stride;
    const Real *b1 = b0 + step * stride, *b2 = b1 + step * stride, *b3 = b2 + step * stride;
    Real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int d = 0; d < HS; ++d) {
      s0 += a[d] * b0[d];
      s1 += a[d] * b1[d];
      s2 += a[d] * b2[d];
      s3 += a[d] * b3[d];
    }
    use(j, s0);
    use(j + step, s1);
    use(j + 2 * step, s2);
    use(j + 3 * step, s3);
  }
  for (; j < end; j += step) use(j, dot(a, rows + j * stride, HS));
}

// One block per (query tile x, head y = b NH + h), Tiles::queries x G threads: thread (r, g),
// r = threadIdx.x % queries, owns query row t = x queries + r and its channels 16 g... The row's
// running maximum m and sum l of exp(s - m) over the keys so far are kept by each of its threads.
// Shared: q (queries, HS + 1), k and v (keys, HS + 1), the scaled logits s and exp(s - m) p
// (queries, keys + 1).
template <typename Element>
__global__ void fused_attention_forward_kernel(Element* out, Compute<Element>* lse, const Element* inp, int T, int C,
                                               int NH, Compute<Element> scale) {
  using Real = Compute<Element>;
  constexpr int Br = Tiles<Real>::queries, Bc = Tiles<Real>::keys;
  const int HS = C / NH, G = HS / kChannels, stride = HS + 1;
  const int head = blockIdx.y, b = head / NH, h = head % NH;
  const int q0 = blockIdx.x * Br, r = threadIdx.x % Br, g = threadIdx.x / Br, t = q0 + r;
  const Element* qkv = inp + size_t(b) * T * 3 * C + h * HS;  // row t of q at qkv + t 3C
  DYNAMIC_SHARED(Real, shared);
  Real* q = shared;             // (Br, HS + 1)
  Real* k = q + Br * stride;    // (Bc, HS + 1)
  Real* v = k + Bc * stride;    // (Bc, HS + 1)
  Real* s = v + Bc * stride;    // (Br, Bc + 1)
  Real* p = s + Br * (Bc + 1);  // (Br, Bc + 1)
  Real* s_row = s + r * (Bc + 1);
  Real* p_row = p + r * (Bc + 1);

  load_rows(q, qkv, 3 * size_t(C), q0, Br, T, HS);
  Real acc[kChannels] = {};  // Σ_j exp(s_j - m) v_j, channels 16 g...
  Real running_max = -INFINITY, running_sum = 0;
  const int last_key = smaller(q0 + Br, T) - 1;
  for (int k0 = 0; k0 <= last_key; k0 += Bc) {
    load_rows(k, qkv + C, 3 * size_t(C), k0, Bc, T, HS);
    load_rows(v, qkv + 2 * C, 3 * size_t(C), k0, Bc, T, HS);
    __syncthreads();
    // Row t sees keys k0 ... min(t, k0 + Bc - 1) of this tile: `keys` of them, none past T.
    const int keys = t < T ? smaller(t - k0 + 1, Bc) : 0;
    dots_with_rows(q + r * stride, k, stride, g, G, keys, HS, [&](int j, Real sum) { s_row[j] = scale * sum; });
    __syncthreads();
    Real tile_max = running_max;
    for (int j = 0; j < keys; ++j) tile_max = s_row[j] > tile_max ? s_row[j] : tile_max;
    for (int j = g; j < keys; j += G) p_row[j] = exponential(s_row[j] - tile_max);
    __syncthreads();
    if (keys > 0) {
      // The online softmax: what the earlier tiles summed was relative to their maximum; scaled
      // by exp(m_old - m_new) it is relative to the new one, as this tile's p are.
      const Real rescale = exponential(running_max - tile_max);
      running_sum *= rescale;
      for (int j = 0; j < keys; ++j) running_sum += p_row[j];
      for (int c = 0; c < kChannels; ++c) acc[c] *= rescale;
      for (int j = 0; j < keys; ++j) {
        const Real* v_row = v + j * stride + g * kChannels;
        for (int c = 0; c < kChannels; ++c) acc[c] += p_row[j] * v_row[c];
      }
      running_max = tile_max;
    }
    __syncthreads();  // before the next tile's k and v, and s and p, are written
  }
  if (t < T) {
    const Real inverse_sum = 1 / running_sum;
    Element* out_row = out + (size_t(b) * T + t) * C + h * HS + g * kChannels;
    for (int c = 0; c < kChannels; ++c) out_row[c] = from_compute<Element>(acc[c] * inverse_sum);
    if (g == 0) lse[size_t(head) * T + t] = running_max + logarithm(running_sum);
  }
}

// dots (B, NH, T) = Σ_d dout * out over each row's head channels: FlashAttention-2's D, which is
// Σ_j p_j dp_j (dp = dout v^T), the term the softmax's backward subtracts. One thread per row.
template <typename Element>
__global__ void output_gradient_dots_kernel(Compute<Element>* dots, const Element* dout, const Element* out,
                                            size_t rows, int T, int C, int NH) {
  using Real = Compute<Element>;
  const size_t row = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int HS = C / NH, t = int(row % T), head = int(row / T), b = head / NH, h = head % NH;
  const size_t at = (size_t(b) * T + t) * C + h * HS;
  Real sum = 0;
  for (int d = 0; d < HS; ++d) sum += to_compute(dout[at + d]) * to_compute(out[at + d]);
  dots[row] = sum;
}

// dK and dV: one block per (key tile x, head y), Tiles::backward x G threads: thread (r, g) owns
// key row j = x backward + r and channels 16 g... of its dk and dv, summed over the query tiles
// from the diagonal on, in order. Per query tile the probabilities p = exp(s - lse) and
// ds = p (dp - D) are recomputed (thread g of key j takes queries g, g + G, ...) into shared
// memory, then summed. Shared: k and v (Bk, HS + 1), q and dout (Bq, HS + 1), the tile's lse and
// D (Bq), p and ds (Bq, Bk + 1).
template <typename Element>
__global__ void fused_attention_key_gradient_kernel(Element* dinp, const Element* dout, const Element* inp,
                                                    const Compute<Element>* lse, const Compute<Element>* dots, int T,
                                                    int C, int NH, Compute<Element> scale) {
  using Real = Compute<Element>;
  constexpr int Bk = Tiles<Real>::backward, Bq = Tiles<Real>::backward;
  const int HS = C / NH, G = HS / kChannels, stride = HS + 1;
  const int head = blockIdx.y, b = head / NH, h = head % NH;
  const int k0 = blockIdx.x * Bk, r = threadIdx.x % Bk, g = threadIdx.x / Bk, j = k0 + r;
  const Element* qkv = inp + size_t(b) * T * 3 * C + h * HS;
  const Element* dout_head = dout + size_t(b) * T * C + h * HS;
  DYNAMIC_SHARED(Real, shared);
  Real* k = shared;                    // (Bk, HS + 1)
  Real* v = k + Bk * stride;           // (Bk, HS + 1)
  Real* q = v + Bk * stride;           // (Bq, HS + 1)
  Real* dO = q + Bq * stride;          // (Bq, HS + 1)
  Real* tile_lse = dO + Bq * stride;   // (Bq)
  Real* tile_dots = tile_lse + Bq;     // (Bq)
  Real* p = tile_dots + Bq;            // (Bq, Bk + 1)
  Real* ds = p + Bq * (Bk + 1);        // (Bq, Bk + 1)

  load_rows(k, qkv + C, 3 * size_t(C), k0, Bk, T, HS);
  load_rows(v, qkv + 2 * C, 3 * size_t(C), k0, Bk, T, HS);
  Real dk[kChannels] = {}, dv[kChannels] = {};
  for (int q0 = k0 / Bq * Bq; q0 < T; q0 += Bq) {
    load_rows(q, qkv, 3 * size_t(C), q0, Bq, T, HS);
    load_rows(dO, dout_head, size_t(C), q0, Bq, T, HS);
    if (int(threadIdx.x) < smaller(Bq, T - q0)) {
      tile_lse[threadIdx.x] = lse[size_t(head) * T + q0 + threadIdx.x];
      tile_dots[threadIdx.x] = dots[size_t(head) * T + q0 + threadIdx.x];
    }
    __syncthreads();
    // Key j is seen by queries max(j, q0) ... min(q0 + Bq, T) - 1 of this tile.
    const int first = j < T ? (j > q0 ? j - q0 : 0) : Bq, end = smaller(Bq, T - q0);
    // The scores q_i . k_j first (kept in p), then the probabilities and ds with dout_i . v_j.
    dots_with_rows(k + r * stride, q, stride, first + g, G, end, HS,
                   [&](int i, Real score) { p[i * (Bk + 1) + r] = score; });
    dots_with_rows(v + r * stride, dO, stride, first + g, G, end, HS, [&](int i, Real dprob) {
      const Real prob = exponential(scale * p[i * (Bk + 1) + r] - tile_lse[i]);
      p[i * (Bk + 1) + r] = prob;
      ds[i * (Bk + 1) + r] = prob * (dprob - tile_dots[i]);
    });
    __syncthreads();
    for (int i = first; i < end; ++i) {
      const Real prob = p[i * (Bk + 1) + r], dscore = ds[i * (Bk + 1) + r];
      const Real* dO_row = dO + i * stride + g * kChannels;
      const Real* q_row = q + i * stride + g * kChannels;
      for (int c = 0; c < kChannels; ++c) {
        dv[c] += prob * dO_row[c];
        dk[c] += dscore * q_row[c];
      }
    }
    __syncthreads();  // before the next query tile is loaded
  }
  if (j < T) {
    Element* dk_row = dinp + (size_t(b) * T + j) * 3 * C + C + h * HS + g * kChannels;
    Element* dv_row = dk_row + C;
    for (int c = 0; c < kChannels; ++c) {
      dk_row[c] = from_compute<Element>(scale * dk[c]);
      dv_row[c] = from_compute<Element>(dv[c]);
    }
  }
}

// dQ: one block per (query tile x, head y), Tiles::backward x G threads: thread (r, g) owns query
// row i = x backward + r and channels 16 g... of its dq, summed over the key tiles up to the
// diagonal, in order; ds is recomputed as in dK's kernel (thread g of row i takes keys g, g + G,
// ...). A second pass instead of FlashAttention-2's atomic adds into dq: deterministic, at the
// cost of computing p and ds twice. Shared: q and dout (Bq, HS + 1), k and v (Bk, HS + 1),
// ds (Bq, Bk + 1).
template <typename Element>
__global__ void fused_attention_query_gradient_kernel(Element* dinp, const Element* dout, const Element* inp,
                                                      const Compute<Element>* lse, const Compute<Element>* dots,
                                                      int T, int C, int NH, Compute<Element> scale) {
  using Real = Compute<Element>;
  constexpr int Bk = Tiles<Real>::backward, Bq = Tiles<Real>::backward;
  const int HS = C / NH, G = HS / kChannels, stride = HS + 1;
  const int head = blockIdx.y, b = head / NH, h = head % NH;
  const int q0 = blockIdx.x * Bq, r = threadIdx.x % Bq, g = threadIdx.x / Bq, i = q0 + r;
  const Element* qkv = inp + size_t(b) * T * 3 * C + h * HS;
  DYNAMIC_SHARED(Real, shared);
  Real* q = shared;            // (Bq, HS + 1)
  Real* dO = q + Bq * stride;  // (Bq, HS + 1)
  Real* k = dO + Bq * stride;  // (Bk, HS + 1)
  Real* v = k + Bk * stride;   // (Bk, HS + 1)
  Real* ds = v + Bk * stride;  // (Bq, Bk + 1)
  Real* ds_row = ds + r * (Bk + 1);

  load_rows(q, qkv, 3 * size_t(C), q0, Bq, T, HS);
  load_rows(dO, dout + size_t(b) * T * C + h * HS, size_t(C), q0, Bq, T, HS);
  const Real row_lse = i < T ? lse[size_t(head) * T + i] : 0, row_dot = i < T ? dots[size_t(head) * T + i] : 0;
  Real dq[kChannels] = {};
  const int last_key = smaller(q0 + Bq, T) - 1;
  for (int k0 = 0; k0 <= last_key; k0 += Bk) {
    load_rows(k, qkv + C, 3 * size_t(C), k0, Bk, T, HS);
    load_rows(v, qkv + 2 * C, 3 * size_t(C), k0, Bk, T, HS);
    __syncthreads();
    const int keys = i < T ? smaller(i - k0 + 1, Bk) : 0;
    // The scores q_i . k_j first (kept in ds), then ds with dout_i . v_j.
    dots_with_rows(q + r * stride, k, stride, g, G, keys, HS, [&](int j, Real score) { ds_row[j] = score; });
    dots_with_rows(dO + r * stride, v, stride, g, G, keys, HS, [&](int j, Real dprob) {
      const Real prob = exponential(scale * ds_row[j] - row_lse);
      ds_row[j] = prob * (dprob - row_dot);
    });
    __syncthreads();
    for (int j = 0; j < keys; ++j) {
      const Real* k_row = k + j * stride + g * kChannels;
      for (int c = 0; c < kChannels; ++c) dq[c] += ds_row[j] * k_row[c];
    }
    __syncthreads();  // before the next key tile is loaded
  }
  if (i < T) {
    Element* dq_row = dinp + (size_t(b) * T + i) * 3 * C + h * HS + g * kChannels;
    for (int c = 0; c < kChannels; ++c) dq_row[c] = from_compute<Element>(scale * dq[c]);
  }
}

}  // namespace

bool fused_attention_takes_heads(int C, int NH) {
  if (NH <= 0 || C % NH != 0) return false;
  const int HS = C / NH;
  return HS % kChannels == 0 && HS <= kMaxHeadSize;
}

namespace {

// The one line a shape the kernels cannot take is refused with.
void require_supported_shape(int B, int C, int NH) {
  const std::string shape = "fused attention: C = " + std::to_string(C) + " channels in NH = " + std::to_string(NH);
  if (NH <= 0 || C % NH != 0) throw std::runtime_error(shape + " heads do not split into heads of equal size");
  const int HS = C / NH;
  if (!fused_attention_takes_heads(C, NH))
    throw std::runtime_error(shape + " heads of HS = " + std::to_string(HS) +
                             " channels: the head size must be a multiple of 16 up to 128");
  if (size_t(B) * NH > kMaxGridY)
    throw std::runtime_error("fused attention: B NH = " + std::to_string(size_t(B) * NH) + " heads exceed the " +
                             std::to_string(kMaxGridY) + " blocks a grid's y dimension allows");
}

unsigned tiles_of(int T, int rows) { return unsigned((T + rows - 1) / rows); }

// Shared memory of each kernel, bytes: rows of HS + 1 values, and the tiles of scores.
template <typename Real>
size_t forward_shared_bytes(int HS) {
  constexpr int Br = Tiles<Real>::queries, Bc = Tiles<Real>::keys;
  return (size_t(Br + 2 * Bc) * (HS + 1) + 2 * Br * (Bc + 1)) * sizeof(Real);
}
template <typename Real>
size_t key_gradient_shared_bytes(int HS) {
  constexpr int B = Tiles<Real>::backward;
  return (size_t(4 * B) * (HS + 1) + 2 * B + 2 * B * (B + 1)) * sizeof(Real);
}
template <typename Real>
size_t query_gradient_shared_bytes(int HS) {
  constexpr int B = Tiles<Real>::backward;
  return (size_t(4 * B) * (HS + 1) + B * (B + 1)) * sizeof(Real);
}

}  // namespace

// ---- launchers ----

size_t fused_attention_saved_size(int B, int T, int NH) { return size_t(B) * NH * T; }
size_t fused_attention_backward_scratch_size(int B, int T, int NH) { return size_t(B) * NH * T; }

template <typename Element>
void fused_attention_forward(Element* out, Compute<Element>* lse, const Element* inp, int B, int T, int C, int NH,
                             cudaStream_t stream) {
  using Real = Compute<Element>;
  require_supported_shape(B, C, NH);
  const int HS = C / NH, G = HS / kChannels, Br = Tiles<Real>::queries;
  launch(fused_attention_forward_kernel<Element>, dim3(tiles_of(T, Br), B * NH), dim3(Br * G),
         forward_shared_bytes<Real>(HS), stream, out, lse, inp, T, C, NH, Real(1 / std::sqrt(Real(HS))));
}

template <typename Element>
void fused_attention_backward(Element* dinp, Compute<Element>* scratch, const Element* dout, const Element* inp,
                              const Element* out, const Compute<Element>* lse, int B, int T, int C, int NH,
                              cudaStream_t stream) {
  using Real = Compute<Element>;
  require_supported_shape(B, C, NH);
  const int HS = C / NH, G = HS / kChannels, Bt = Tiles<Real>::backward;
  const Real scale = 1 / std::sqrt(Real(HS));
  Real* dots = scratch;  // (B, NH, T)
  const size_t rows = size_t(B) * NH * T;
  launch(output_gradient_dots_kernel<Element>, dim3(unsigned((rows + kRowThreads - 1) / kRowThreads)),
         dim3(kRowThreads), 0, stream, dots, dout, out, rows, T, C, NH);
  const dim3 grid(tiles_of(T, Bt), B * NH), block(Bt * G);
  launch(fused_attention_key_gradient_kernel<Element>, grid, block, key_gradient_shared_bytes<Real>(HS), stream, dinp,
         dout, inp, lse, (const Real*)dots, T, C, NH, scale);
  launch(fused_attention_query_gradient_kernel<Element>, grid, block, query_gradient_shared_bytes<Real>(HS), stream,
         dinp, dout, inp, lse, (const Real*)dots, T, C, NH, scale);
}

#define INSTANTIATE_FUSED_ATTENTION(Element)                                                                     \
  template void fused_attention_forward<Element>(Element*, Compute<Element>*, const Element*, int, int, int, int, \
                                                 cudaStream_t);                                                  \
  template void fused_attention_backward<Element>(Element*, Compute<Element>*, const Element*, const Element*,    \
                                                  const Element*, const Compute<Element>*, int, int, int, int,    \
                                                  cudaStream_t);
INSTANTIATE_FUSED_ATTENTION(double)
INSTANTIATE_FUSED_ATTENTION(float)
INSTANTIATE_FUSED_ATTENTION(__nv_bfloat16)
