// The AdamW step (kernels/adamw.cuh): one thread per parameter; the bias corrections
// depend only on t, so the launcher computes them once in double.
#include "kernels/adamw.cuh"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "kernels/global_norm.cuh"
#include "kernels/launch.cuh"
#include "kernels/stochastic_rounding.cuh"

namespace {

__device__ inline float square_root(float x) { return sqrtf(x); }
__device__ inline double square_root(double x) { return sqrt(x); }

// The updated parameter in its storage type: float and double as computed, bf16 rounded
// stochastically with the bits of the call's element i.
template <typename T>
__device__ inline T stored(Compute<T> p, StochasticRounding rounding, size_t i) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return round_stochastically(p, rounding_bits(rounding.key, rounding.first_index + i));
  } else {
    return p;
  }
}

// One parameter's update, the arithmetic both kernels share; bias_correction1 = 1 - beta1^t and
// bias_correction2 = 1 - beta2^t. `rounding` and `rounding_i` give bf16's stochastic-rounding bits.
template <typename T>
__device__ inline void adamw_element(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m,
                                     Compute<T>* v, size_t i, Compute<T> learning_rate, Compute<T> beta1,
                                     Compute<T> beta2, Compute<T> bias_correction1, Compute<T> bias_correction2,
                                     Compute<T> eps, Compute<T> weight_decay, Compute<T> grad_scale,
                                     StochasticRounding rounding, size_t rounding_i) {
  using C = Compute<T>;
  const C g = grad_scale * to_compute(grads[i]);
  const C new_m = beta1 * m[i] + (C(1) - beta1) * g;
  const C new_v = beta2 * v[i] + (C(1) - beta2) * g * g;
  m[i] = new_m;
  v[i] = new_v;
  const C p = master_params != nullptr ? master_params[i] : to_compute(params[i]);
  const C m_hat = new_m / bias_correction1;
  const C v_hat = new_v / bias_correction2;
  const C new_p = p - learning_rate * (m_hat / (square_root(v_hat) + eps) + weight_decay * p);
  if (master_params != nullptr) master_params[i] = new_p;
  params[i] = stored<T>(new_p, rounding, rounding_i);
}

template <typename T>
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_kernel(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m, Compute<T>* v, size_t n,
                 Compute<T> learning_rate, Compute<T> beta1, Compute<T> beta2, Compute<T> bias_correction1,
                 Compute<T> bias_correction2, Compute<T> eps, Compute<T> weight_decay, Compute<T> grad_scale,
                 StochasticRounding rounding) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;  // no barriers or shuffles in this kernel
  adamw_element(params, master_params, grads, m, v, i, learning_rate, beta1, beta2, bias_correction1,
                bias_correction2, eps, weight_decay, grad_scale, rounding, i);
}

// adamw_element over a table of regions: each element with its region's decay and rounding index,
// the region found from the block's entry of block_regions (usually 0 or 1 steps forward).
template <typename T>
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_regions_kernel(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m, Compute<T>* v,
                         size_t n, const AdamWRegion* regions, const int* block_regions, Compute<T> learning_rate,
                         Compute<T> beta1, Compute<T> beta2, Compute<T> bias_correction1,
                         Compute<T> bias_correction2, Compute<T> eps, Compute<T> decay, const AdamWGate* gate,
                         uint64_t rounding_key) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n || !gate->apply) return;  // no barriers or shuffles in this kernel
  int r = block_regions[blockIdx.x];
  while (regions[r].offset + regions[r].count <= i) ++r;
  const AdamWRegion& region = regions[r];
  adamw_element(params, master_params, grads, m, v, i, learning_rate, beta1, beta2, bias_correction1,
                bias_correction2, eps, region.decays ? decay : Compute<T>(0), Compute<T>(gate->grad_scale),
                {rounding_key, full_model_index(region, i - region.offset)}, 0);
}

// A value is finite when x - x is 0 (infinities and NaNs give NaN).
__device__ inline bool is_finite(double x) { return x - x == 0.0; }

__global__ void adamw_gate_kernel(AdamWGate* gate, double* norm, const float* squared_norm,
                                  const double* nonfinite_ranks, double grad_clip) {
  const double value = sqrt(double(*squared_norm));
  *norm = value;
  gate->grad_scale = grad_clip > 0 ? clip_factor(value, grad_clip) : 1.0;
  gate->apply = *nonfinite_ranks == 0.0 && is_finite(value);
}

__global__ void flag_nonfinite_kernel(double* nonfinite, const double* value) {
  *nonfinite = is_finite(*value) ? 0.0 : 1.0;
}

// 1 - beta1^t and 1 - beta2^t, in double once per launch; exits naming `launcher` when t < 1.
struct BiasCorrections {
  double first, second;
};
BiasCorrections bias_corrections(const char* launcher, double beta1, double beta2, int t) {
  if (t < 1) {
    std::fprintf(stderr, "%s: the step counter t starts at 1, got %d\n", launcher, t);
    std::exit(EXIT_FAILURE);
  }
  return {1.0 - std::pow(beta1, t), 1.0 - std::pow(beta2, t)};
}

}  // namespace

// ---- launchers ----

template <typename T>
void adamw_update(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m, Compute<T>* v, size_t n,
                  double learning_rate, double beta1, double beta2, double eps, double weight_decay,
                  double grad_scale, int t, StochasticRounding rounding, cudaStream_t stream) {
  const BiasCorrections corrections = bias_corrections("adamw_update", beta1, beta2, t);
  if (n == 0) return;
  using C = Compute<T>;
  const size_t blocks = (n + kAdamWThreads - 1) / kAdamWThreads;
  launch(adamw_kernel<T>, dim3(unsigned(blocks)), dim3(kAdamWThreads), 0, stream, params, master_params, grads, m,
         v, n, C(learning_rate), C(beta1), C(beta2), C(corrections.first), C(corrections.second), C(eps),
         C(weight_decay), C(grad_scale), rounding);
}

void set_adamw_gate(AdamWGate* gate, double* norm, const float* squared_norm, const double* nonfinite_ranks,
                    double grad_clip, cudaStream_t stream) {
  launch(adamw_gate_kernel, dim3(1), dim3(1), 0, stream, gate, norm, squared_norm, nonfinite_ranks, grad_clip);
}

void flag_nonfinite(double* nonfinite, const double* value, cudaStream_t stream) {
  launch(flag_nonfinite_kernel, dim3(1), dim3(1), 0, stream, nonfinite, value);
}

std::vector<int> adamw_block_regions(const std::vector<AdamWRegion>& regions, size_t n) {
  std::vector<int> table;
  int r = 0;
  for (size_t block = 0; block < adamw_region_blocks(n); ++block) {
    const size_t first = block * kAdamWThreads;
    while (regions[r].offset + regions[r].count <= first) ++r;
    table.push_back(r);
  }
  return table;
}

template <typename T>
void adamw_update_regions(T* params, Compute<T>* master_params, const T* grads, Compute<T>* m, Compute<T>* v,
                          size_t n, const AdamWRegion* regions, const int* block_regions, double learning_rate,
                          double beta1, double beta2, double eps, double weight_decay, const AdamWGate* gate, int t,
                          uint64_t rounding_key, cudaStream_t stream) {
  const BiasCorrections corrections = bias_corrections("adamw_update_regions", beta1, beta2, t);
  if (n == 0) return;
  using C = Compute<T>;
  launch(adamw_regions_kernel<T>, dim3(unsigned(adamw_region_blocks(n))), dim3(kAdamWThreads), 0, stream, params,
         master_params, grads, m, v, n, regions, block_regions, C(learning_rate), C(beta1), C(beta2),
         C(corrections.first), C(corrections.second), C(eps), C(weight_decay), gate, rounding_key);
}

template void adamw_update_regions<float>(float*, float*, const float*, float*, float*, size_t, const AdamWRegion*,
                                          const int*, double, double, double, double, double, const AdamWGate*, int,
                                          uint64_t, cudaStream_t);
template void adamw_update_regions<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, float*, float*,
                                                  size_t, const AdamWRegion*, const int*, double, double, double,
                                                  double, double, const AdamWGate*, int, uint64_t, cudaStream_t);
template void adamw_update<double>(double*, double*, const double*, double*, double*, size_t, double, double,
                                   double, double, double, double, int, StochasticRounding, cudaStream_t);
template void adamw_update<float>(float*, float*, const float*, float*, float*, size_t, double, double, double,
                                  double, double, double, int, StochasticRounding, cudaStream_t);
template void adamw_update<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, float*, float*, size_t,
                                          double, double, double, double, double, double, int, StochasticRounding,
                                          cudaStream_t);
