// AdamW with weight-decay groups, the global gradient norm and clipping (trainer/optimizer.h).
#include "trainer/optimizer.h"

#include <array>
#include <cmath>

#include "kernels/adamw.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/global_norm.cuh"
#include "model/parameters.h"

Optimizer create_optimizer(const GPTConfig& config) {
  const size_t n = num_parameters(config);
  Optimizer optimizer{config, nullptr, nullptr, nullptr, nullptr};
  CUDA_CHECK(cudaMalloc(&optimizer.m, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&optimizer.v, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&optimizer.norm_workspace, global_norm_workspace_size(1) * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&optimizer.squared_norm, sizeof(float)));
  CUDA_CHECK(cudaMemset(optimizer.m, 0, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(optimizer.v, 0, n * sizeof(float)));
  return optimizer;
}

void destroy_optimizer(Optimizer& optimizer) {
  CUDA_CHECK(cudaFree(optimizer.m));
  CUDA_CHECK(cudaFree(optimizer.v));
  CUDA_CHECK(cudaFree(optimizer.norm_workspace));
  CUDA_CHECK(cudaFree(optimizer.squared_norm));
  optimizer = Optimizer{};
}

double gradient_norm(Optimizer& optimizer, const float* gradients, cudaStream_t stream) {
  const size_t n = num_parameters(optimizer.config);
  global_norm_squared<float>(optimizer.squared_norm, nullptr, optimizer.norm_workspace, &gradients, &n, 1, stream);
  float squared_norm = 0;
  CUDA_CHECK(cudaMemcpyAsync(&squared_norm, optimizer.squared_norm, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(double(squared_norm));
}

double adamw_step(Optimizer& optimizer, float* parameters, const float* gradients, const AdamWSettings& settings,
                  double learning_rate, int t, cudaStream_t stream) {
  const double norm = gradient_norm(optimizer, gradients, stream);
  const double grad_scale = settings.grad_clip > 0 ? clip_factor(norm, settings.grad_clip) : 1.0;
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(optimizer.config);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(optimizer.config);
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const double weight_decay = parameter_tensor_has_weight_decay(i) ? settings.weight_decay : 0.0;
    adamw_update<float>(parameters + offsets[i], nullptr, gradients + offsets[i], optimizer.m + offsets[i],
                        optimizer.v + offsets[i], sizes[i], learning_rate, settings.beta1, settings.beta2, settings.eps,
                        weight_decay, grad_scale, t, stream);
  }
  return norm;
}

void download_moments(const Optimizer& optimizer, std::vector<float>& m, std::vector<float>& v) {
  const size_t n = num_parameters(optimizer.config);
  m.resize(n);
  v.resize(n);
  CUDA_CHECK(cudaMemcpy(m.data(), optimizer.m, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(v.data(), optimizer.v, n * sizeof(float), cudaMemcpyDeviceToHost));
}

void upload_moments(Optimizer& optimizer, const std::vector<float>& m, const std::vector<float>& v) {
  const size_t n = num_parameters(optimizer.config);
  CUDA_CHECK(cudaMemcpy(optimizer.m, m.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(optimizer.v, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}
