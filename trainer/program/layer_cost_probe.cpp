// Timed forwards and backwards of each layer kind (trainer/program/layer_cost_probe.h).
#include "trainer/program/layer_cost_probe.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/gemm.cuh"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"

namespace {

struct RangeCosts {
  double forward, backward, update;  // ns, medians
};

double median_ns(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double elapsed_ns(std::chrono::steady_clock::time_point since) {
  return double(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since).count());
}

void* zeroed(size_t bytes) {
  void* memory = device_alloc_bytes(bytes);
  CUDA_CHECK(cudaMemset(memory, 0, bytes));
  return memory;
}

// One range's forward and backward, timed: an embedding range reads tokens, the others a (B, T, C)
// input; a head range starts its backward from the loss, the others from a (B, T, C) gradient.
// One AdamW update of the range's n parameters, timed (the run's: fp32 moments, and with bf16 the
// fp32 master weights, as --master-weights 1 keeps them): what PipeDream runs after each K-th backward.
template <typename Element>
double time_update(Element* params, const Element* grads, size_t n, cudaStream_t stream, int repeats) {
  const bool master = sizeof(Element) < sizeof(float);
  auto* moments = static_cast<Compute<Element>*>(zeroed(2 * n * sizeof(Compute<Element>)));
  auto* master_params = master ? static_cast<Compute<Element>*>(zeroed(n * sizeof(Compute<Element>))) : nullptr;
  std::vector<double> times;
  for (int call = 0; call <= repeats; ++call) {
    const auto start = std::chrono::steady_clock::now();
    adamw_update(params, master_params, grads, moments, moments + n, n, 1e-3, 0.9, 0.95, 1e-8, 0.0, 1.0, call + 1,
                 StochasticRounding{0, 0}, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (call > 0) times.push_back(elapsed_ns(start));  // the first touches the buffers
  }
  device_free(moments);
  device_free(master_params);
  return median_ns(times);
}

template <typename Element>
RangeCosts time_range(const GPTConfig& config, const LayerRange& range, int B, int T, AttentionKind attention,
                           cublasHandle_t cublas, cudaStream_t stream, int repeats) {
  const ParameterLayout layout = parameter_layout(config, {range});
  const size_t btc_bytes = size_t(B) * T * config.channels * sizeof(Element);
  Element* params = static_cast<Element*>(zeroed(layout.size * sizeof(Element)));
  Element* grads = static_cast<Element*>(zeroed(layout.size * sizeof(Element)));
  int* tokens = static_cast<int*>(zeroed(size_t(B) * T * sizeof(int)));  // also the targets: token 0
  Element* input = range.has_embedding ? nullptr : static_cast<Element*>(zeroed(btc_bytes));
  Element* grad_input = range.has_embedding ? nullptr : static_cast<Element*>(zeroed(btc_bytes));
  Element* grad_output = range.has_head ? nullptr : static_cast<Element*>(zeroed(btc_bytes));
  Element* grad_wte_head = range.has_head ? static_cast<Element*>(zeroed(size_t(config.padded_vocab_size) *
                                                                          config.channels * sizeof(Element)))
                                          : nullptr;
  Activations<Element> acts = create_activations<Element>(config, B, T, range, 1, attention);
  BackwardScratch<Element> scratch = create_backward_scratch<Element>(config, B, T, range, 1, attention);
  const ParameterTensors<Element> param_views = chunk_views(params, layout, 0);
  const ParameterTensors<Element> grad_views = chunk_views(grads, layout, 0);
  std::vector<double> forwards, backwards;
  for (int call = 0; call <= repeats; ++call) {
    const auto start = std::chrono::steady_clock::now();
    gpt_forward(config, range, param_views, acts, range.has_embedding ? tokens : nullptr, input,
                range.has_head ? tokens : nullptr, 1.0 / (double(B) * T), B, T, cublas, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double forward = elapsed_ns(start);
    const auto backward_start = std::chrono::steady_clock::now();
    gpt_backward(config, range, param_views, grad_views, grad_wte_head, acts, scratch, range.has_embedding ? tokens : nullptr,
                 input, grad_output, grad_input, B, T, cublas, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (call == 0) continue;  // the first touch of every buffer
    forwards.push_back(forward);
    backwards.push_back(elapsed_ns(backward_start));
  }
  const double update = time_update(params, grads, layout.size, stream, repeats);
  destroy_backward_scratch(scratch);
  destroy_activations(acts);
  for (void* memory : {static_cast<void*>(params), static_cast<void*>(grads), static_cast<void*>(tokens),
                       static_cast<void*>(input), static_cast<void*>(grad_input), static_cast<void*>(grad_output),
                       static_cast<void*>(grad_wte_head)})
    device_free(memory);
  return {median_ns(forwards), median_ns(backwards), update};
}

}  // namespace

template <typename Element>
MeasuredLayerCosts probe_layer_costs(const GPTConfig& config, int B, int T, AttentionKind attention, bool tf32,
                                     int repeats) {
  cudaStream_t stream;
  cublasHandle_t cublas;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUBLAS_CHECK(cublasCreate(&cublas));
  void* workspace = device_alloc_bytes(cublas_workspace_bytes());
  bind_cublas(cublas, stream, workspace, cublas_workspace_bytes());
  CUBLAS_CHECK(cublasSetMathMode(cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const int L = config.num_layers;
  const RangeCosts block = time_range<Element>(config, {0, 1, false, false}, B, T, attention, cublas, stream, repeats);
  const RangeCosts embedding =
      time_range<Element>(config, {0, 0, true, false}, B, T, attention, cublas, stream, repeats);
  const RangeCosts head = time_range<Element>(config, {L, L, false, true}, B, T, attention, cublas, stream, repeats);
  CUBLAS_CHECK(cublasDestroy(cublas));
  CUDA_CHECK(cudaStreamDestroy(stream));
  device_free(workspace);
  return {block.forward,     block.backward, embedding.forward, embedding.backward, head.forward,
          head.backward,     block.update,   embedding.update,  head.update};
}

template MeasuredLayerCosts probe_layer_costs<float>(const GPTConfig&, int, int, AttentionKind, bool, int);
template MeasuredLayerCosts probe_layer_costs<__nv_bfloat16>(const GPTConfig&, int, int, AttentionKind, bool, int);
