// The single-process model on the device and its training step (trainer/trainer.h).
#include "trainer/trainer.h"

#include <stdexcept>

#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"

Trainer create_trainer(const GPTConfig& config, int B, int T, int microbatches) {
  if (T > config.max_seq_len) {
    throw std::runtime_error("--seq-len " + std::to_string(T) + " is above the model's maxT " +
                             std::to_string(config.max_seq_len));
  }
  Trainer trainer;
  trainer.config = config;
  trainer.B = B;
  trainer.T = T;
  trainer.microbatches = microbatches;
  CUDA_CHECK(cudaStreamCreate(&trainer.stream));
  CUBLAS_CHECK(cublasCreate(&trainer.cublas));
  CUBLAS_CHECK(cublasSetStream(trainer.cublas, trainer.stream));
  const size_t n = num_parameters(config);
  const size_t wte_size = size_t(config.padded_vocab_size) * config.channels;
  CUDA_CHECK(cudaMalloc(&trainer.parameter_memory, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&trainer.gradient_memory, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&trainer.grad_wte_head, wte_size * sizeof(float)));
  trainer.params = point_views(trainer.parameter_memory, config);
  trainer.grads = point_views(trainer.gradient_memory, config);
  const LayerRange range = whole_model(config);
  trainer.acts = create_activations<float>(config, B, T, range);
  trainer.scratch = create_backward_scratch<float>(config, B, T, range);
  trainer.optimizer = create_optimizer(config);
  const size_t BT = size_t(B) * T;
  CUDA_CHECK(cudaMalloc(&trainer.tokens, BT * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&trainer.targets, BT * sizeof(int)));
  trainer.host_tokens.resize(BT);
  trainer.host_targets.resize(BT);
  trainer.host_logits.resize(config.padded_vocab_size);
  return trainer;
}

void destroy_trainer(Trainer& trainer) {
  CUDA_CHECK(cudaFree(trainer.parameter_memory));
  CUDA_CHECK(cudaFree(trainer.gradient_memory));
  CUDA_CHECK(cudaFree(trainer.grad_wte_head));
  destroy_activations(trainer.acts);
  destroy_backward_scratch(trainer.scratch);
  destroy_optimizer(trainer.optimizer);
  CUDA_CHECK(cudaFree(trainer.tokens));
  CUDA_CHECK(cudaFree(trainer.targets));
  CUBLAS_CHECK(cublasDestroy(trainer.cublas));
  CUDA_CHECK(cudaStreamDestroy(trainer.stream));
}

void upload_parameters(Trainer& trainer, const std::vector<float>& parameters) {
  const size_t n = num_parameters(trainer.config);
  if (parameters.size() != n) throw std::runtime_error("upload_parameters: wrong number of parameters");
  CUDA_CHECK(cudaMemcpy(trainer.parameter_memory, parameters.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<float> download_parameters(const Trainer& trainer) {
  std::vector<float> parameters(num_parameters(trainer.config));
  CUDA_CHECK(cudaMemcpy(parameters.data(), trainer.parameter_memory, parameters.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  return parameters;
}

namespace {

// Reads the reader's next microbatch and copies its tokens and targets to the device.
void load_microbatch(Trainer& trainer, BatchReader& reader) {
  read_microbatch(reader, trainer.host_tokens.data(), trainer.host_targets.data());
  const size_t bytes = trainer.host_tokens.size() * sizeof(int);
  CUDA_CHECK(cudaMemcpyAsync(trainer.tokens, trainer.host_tokens.data(), bytes, cudaMemcpyHostToDevice, trainer.stream));
  CUDA_CHECK(
      cudaMemcpyAsync(trainer.targets, trainer.host_targets.data(), bytes, cudaMemcpyHostToDevice, trainer.stream));
}

}  // namespace

StepResult train_step(Trainer& trainer, BatchReader& reader, const AdamWSettings& settings, double learning_rate,
                      int t) {
  const GPTConfig& config = trainer.config;
  const LayerRange range = whole_model(config);
  const int B = trainer.B, T = trainer.T;
  CUDA_CHECK(cudaMemsetAsync(trainer.gradient_memory, 0, num_parameters(config) * sizeof(float), trainer.stream));
  CUDA_CHECK(cudaMemsetAsync(trainer.grad_wte_head, 0, size_t(config.padded_vocab_size) * config.channels * sizeof(float),
                             trainer.stream));
  const double loss_scale = 1.0 / (double(B) * T * trainer.microbatches);
  double loss_sum = 0;
  for (int microbatch = 0; microbatch < trainer.microbatches; ++microbatch) {
    load_microbatch(trainer, reader);
    gpt_forward(config, range, trainer.params, trainer.acts, trainer.tokens, nullptr, trainer.targets, loss_scale, B,
                T, trainer.cublas, trainer.stream);
    loss_sum += mean_loss(trainer.acts, B, T, trainer.stream);
    gpt_backward(config, range, trainer.params, trainer.grads, trainer.grad_wte_head, trainer.acts, trainer.scratch,
                 trainer.tokens, nullptr, nullptr, nullptr, B, T, trainer.cublas, trainer.stream);
  }
  sum_tied_embedding_gradient(config, trainer.grads.wte, trainer.grad_wte_head, trainer.stream);
  const double norm =
      adamw_step(trainer.optimizer, trainer.parameter_memory, trainer.gradient_memory, settings, learning_rate, t,
                 trainer.stream);
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));
  return {loss_sum / trainer.microbatches, norm};
}

double validation_loss(Trainer& trainer, BatchReader& reader, int batches) {
  const LayerRange range = whole_model(trainer.config);
  const uint64_t resume_position = reader.next_microbatch;
  reader.next_microbatch = 0;
  double loss_sum = 0;
  for (int batch = 0; batch < batches; ++batch) {
    load_microbatch(trainer, reader);
    gpt_forward(trainer.config, range, trainer.params, trainer.acts, trainer.tokens, nullptr, trainer.targets, 1.0,
                trainer.B, trainer.T, trainer.cublas, trainer.stream);
    loss_sum += mean_loss(trainer.acts, trainer.B, trainer.T, trainer.stream);
  }
  reader.next_microbatch = resume_position;
  return loss_sum / batches;
}

const std::vector<float>& next_token_logits(Trainer& trainer, const int* context, int count) {
  const LayerRange range = whole_model(trainer.config);
  const size_t Vp = trainer.config.padded_vocab_size;
  CUDA_CHECK(cudaMemcpyAsync(trainer.tokens, context, size_t(count) * sizeof(int), cudaMemcpyHostToDevice,
                             trainer.stream));
  gpt_forward(trainer.config, range, trainer.params, trainer.acts, trainer.tokens, nullptr, nullptr, 1.0, 1, count,
              trainer.cublas, trainer.stream);
  trainer.host_logits.resize(Vp);
  CUDA_CHECK(cudaMemcpyAsync(trainer.host_logits.data(), trainer.acts.logits + size_t(count - 1) * Vp,
                             Vp * sizeof(float), cudaMemcpyDeviceToHost, trainer.stream));
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));
  trainer.host_logits.resize(trainer.config.vocab_size);
  return trainer.host_logits;
}
