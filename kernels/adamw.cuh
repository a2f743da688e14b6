// The AdamW optimizer step (decoupled weight decay, bias-corrected moments): one parameter
// tensor or group per call, or a stage's regions in one launch with the clipping factor and the
// decision to apply the step read from device memory. Instantiated for double (double
// throughout, for checks), float, and __nv_bfloat16 parameters and gradients with fp32 moments,
// an optional fp32 master copy of the parameters, and the bf16 parameters written by stochastic
// rounding.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/element.cuh"

// Where a call's bf16 parameters take their rounding bits (kernels/stochastic_rounding.cuh):
// element i of the call rounds with rounding_bits(key, first_index + i). The trainer's key is
// rounding_key(seed, t), and first_index the call's first element's index in the whole model's
// llm.c layout. Ignored for float and double parameters, which are not rounded.
struct StochasticRounding {
  uint64_t key;
  uint64_t first_index;
};

// One AdamW step, t = 1, 2, ... counting steps, over n parameters, updated in place (=):
//   g = grad_scale * grads                (grad_scale: e.g. the clipping factor)
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
//   p = p - learning_rate (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay p)
// params (n), grads (n), m and v (n) in Compute<T> (fp32 for float and bf16). When
// master_params (n, Compute<T>) is not null it holds p and is updated, and params becomes
// its rounding to T; else p is read from params. bf16 parameters are written from the fp32 p
// by stochastic rounding with the bits rounding gives (unbiased: an update smaller than a bf16
// ulp moves the parameter by a whole ulp with the matching probability instead of never).
// weight_decay applies to this call's parameters only: the caller calls once per group
// (e.g. 0 for biases and LayerNorm). Saves nothing.
template <typename T>
void adamw_update(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m, Compute<T>* v, size_t n,
                  double learning_rate, double beta1, double beta2, double eps, double weight_decay,
                  double grad_scale, int t, StochasticRounding rounding, cudaStream_t stream);

// What a training step decided on the device before its update (trainer/step/optimizer.h): the
// gradient's scale (the clipping factor, or 1) and whether to apply the step at all (0: a
// non-finite loss or norm, and the update leaves everything as it was).
struct AdamWGate {
  double grad_scale;
  int apply;
};

// *gate (device) from the step's figures on the device, by one thread: *norm (=) = sqrt of
// *squared_norm in double; grad_scale = clip_factor(*norm, grad_clip) when grad_clip > 0, else 1;
// apply = (*nonfinite_ranks == 0 and *norm is finite). The same arithmetic as the host's, so the
// update is bitwise the one a host-computed factor gives.
void set_adamw_gate(AdamWGate* gate, double* norm, const float* squared_norm, const double* nonfinite_ranks,
                    double grad_clip, cudaStream_t stream);

// *nonfinite (=) = 0 when *value is finite, else 1 (device, one thread).
void flag_nonfinite(double* nonfinite, const double* value, cudaStream_t stream);

// One region of a stage's parameters for adamw_update_regions: elements [offset, offset + count)
// of the stage's arrays, the first one's index in the whole model (for the rounding bits), and
// whether the weight decay applies to it. A tensor-parallel rank's slice of a layer's matrix is
// not one run of the whole model's elements but runs of run_length consecutive ones (its rows, or
// its columns of each row), run_stride apart; the default is one run.
struct AdamWRegion {
  size_t offset;
  size_t count;
  size_t full_offset;
  int decays;
  size_t run_length = ~size_t(0);
  size_t run_stride = 0;
};

// The index in the whole model of the region's element j (0 <= j < count): the rounding index,
// so that an element rounds alike whatever slice of it a rank holds.
__host__ __device__ inline size_t full_model_index(const AdamWRegion& region, size_t j) {
  return region.full_offset + j / region.run_length * region.run_stride + j % region.run_length;
}

// The AdamW kernels' threads a block, one element each.
constexpr int kAdamWThreads = 512;

// The blocks of adamw_update_regions's launch over n elements.
inline size_t adamw_region_blocks(size_t n) { return (n + kAdamWThreads - 1) / kAdamWThreads; }

// adamw_update_regions's block table, made once on the host: for each of its adamw_region_blocks(n)
// blocks, the index of the region holding the block's first element (regions sorted by offset,
// covering [0, n) exactly once; empty ones allowed, never an entry). A thread starts from its
// block's entry and steps forward to its own element's region, instead of a binary search per
// element; regions smaller than a block are why it must step at all.
std::vector<int> adamw_block_regions(const std::vector<AdamWRegion>& regions, size_t n);

// adamw_update over n elements in one launch, with weight_decay on the regions that decay (0 on
// the others) and each element's rounding index from its region: regions (device, sorted by
// offset) cover [0, n) exactly once; block_regions (device) is adamw_block_regions(regions, n).
// grad_scale and whether to update at all come from *gate (device): a skipped step changes
// nothing. Element i of region r is updated bitwise as adamw_update of that region alone updates
// its element i - r.offset with rounding {key, r.full_offset} (for one run; else each run alone,
// from its own first index). For float and bf16.
template <typename T>
void adamw_update_regions(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m, Compute<T>* v,
                          size_t n, const AdamWRegion* regions, const int* block_regions, double learning_rate,
                          double beta1, double beta2, double eps, double weight_decay, const AdamWGate* gate, int t,
                          uint64_t rounding_key, cudaStream_t stream);
