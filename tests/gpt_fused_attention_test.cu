// The whole model with the fused attention (model/gpt.cuh, AttentionKind::fused): its loss and
// gradients against the materialised attention's in double, fp32 and bf16, its gradient against
// finite differences in double, and its activation and scratch bytes, smaller by the (T, T)
// probabilities and what is allocated.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/fused_attention.cuh"
#include "model/gpt.cuh"
#include "model/parameters.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/sampled_model_gradient.h"
#include "tests/scaled_error.h"

namespace {

// Heads of 16 channels, the fused kernels' smallest; T = 17 is not a multiple of their tiles.
const GPTConfig kConfig = make_gpt_config(2, 2, 32, 17, 11);
constexpr int kB = 2, kT = 17;

// GPT-2's initialisation plus uniform noise in [-0.1, 0.1) (as tests/gpt_test.cu's).
std::vector<double> test_parameters(uint64_t seed) {
  std::vector<float> init;
  init_gpt2_parameters(init, kConfig, seed);
  std::vector<double> params = random_values(init.size(), seed + 1, -0.1, 0.1);
  for (size_t i = 0; i < params.size(); ++i) params[i] += init[i];
  return params;
}

std::vector<int> random_tokens(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> tokens(size_t(kB) * kT);
  for (int& token : tokens) token = int(rng() % uint64_t(kConfig.vocab_size));
  return tokens;
}

// The whole model with one attention: a forward with targets (the mean loss's gradient) and,
// on demand, the backward; the gradient is all parameters', wte's two shares summed.
template <typename Element>
struct WholeModel {
  DeviceBuffer<Element> params, grads, grad_wte_head;
  DeviceBuffer<int> tokens, targets;
  Activations<Element> acts;
  BackwardScratch<Element> scratch;
  CublasHandle cublas;

  WholeModel(const std::vector<double>& host_params, AttentionKind attention)
      : params(convert<Element>(host_params)),
        grads(std::vector<Element>(host_params.size(), Element(0.0f))),
        grad_wte_head(std::vector<Element>(size_t(kConfig.padded_vocab_size) * kConfig.channels, Element(0.0f))),
        tokens(random_tokens(100)),
        targets(random_tokens(200)),
        acts(create_activations<Element>(kConfig, kB, kT, whole_model(kConfig), 1, attention)),
        scratch(create_backward_scratch<Element>(kConfig, kB, kT, whole_model(kConfig), 1, attention)) {}
  ~WholeModel() {
    destroy_activations(acts);
    destroy_backward_scratch(scratch);
  }
  double loss(const std::vector<double>& host_params) {
    params.upload(convert<Element>(host_params));
    gpt_forward(kConfig, whole_model(kConfig), point_views(params.data(), kConfig), acts, tokens.data(), nullptr,
                targets.data(), 1.0 / (kB * kT), kB, kT, cublas.get(), nullptr);
    return mean_loss(acts, kB, kT, nullptr);
  }
  std::vector<double> gradient() {
    gpt_backward(kConfig, whole_model(kConfig), point_views(params.data(), kConfig), point_views(grads.data(), kConfig),
                 grad_wte_head.data(), acts, scratch, tokens.data(), nullptr, nullptr, nullptr, kB, kT, cublas.get(),
                 nullptr);
    sum_tied_embedding_gradient(kConfig, point_views(grads.data(), kConfig).wte, grad_wte_head.data(), nullptr);
    return to_double(grads.to_host());
  }
};

struct LossAndGradient {
  double loss;
  std::vector<double> gradient;
};

template <typename Element>
LossAndGradient run(const std::vector<double>& host_params, AttentionKind attention) {
  WholeModel<Element> model(host_params, attention);
  const double loss = model.loss(host_params);
  return {loss, model.gradient()};
}

// Each parameter tensor's gradient, fused against materialized, relative to the tensor's scale.
template <typename Element>
void expect_fused_matches_materialized(double loss_tolerance, double gradient_tolerance) {
  const std::vector<double> host_params = test_parameters(21);
  const LossAndGradient materialized = run<Element>(host_params, AttentionKind::materialized);
  const LossAndGradient fused = run<Element>(host_params, AttentionKind::fused);
  EXPECT_NEAR(fused.loss, materialized.loss, loss_tolerance * materialized.loss);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kConfig);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(kConfig);
  for (int tensor = 0; tensor < kNumParameterTensors; ++tensor) {
    const auto slice = [&](const std::vector<double>& g) {
      return std::vector<double>(g.begin() + offsets[tensor], g.begin() + offsets[tensor] + sizes[tensor]);
    };
    EXPECT_LE(max_error_relative_to_scale(slice(fused.gradient), slice(materialized.gradient)), gradient_tolerance)
        << parameter_tensor_name(tensor);
  }
}

}  // namespace

// Both attentions compute the same function; only the order of the softmax's sums differs (the
// fused one's online rescaling, its dot products in its own order, not cuBLAS's).
// double: rounding of 2^-53 over sums of at most T = 17 and C = 32 terms, a few hundred operations
// deep: ~1e-14 at most; 1e-12 leaves room and still fails on any wrong formula (a dropped rescale
// or a wrong layer's qkv is off by O(1)).
TEST(GPTFusedAttention, MatchesMaterializedInDouble) { expect_fused_matches_materialized<double>(1e-12, 1e-12); }

// fp32: the same sums in another order at 2^-24 (6e-8) each; the attention's errors reach every
// gradient through about 40 stored values: sqrt(40) 6e-8 = 4e-7 at one standard deviation, bounded
// by 1e-5 (25 of them) for the gradients and the loss.
TEST(GPTFusedAttention, MatchesMaterializedInFp32) { expect_fused_matches_materialized<float>(1e-5, 1e-5); }

// bf16: the materialised attention stores q, k, v and the probabilities in bf16 (2^-9 each), the
// fused one keeps the probabilities in fp32: the two differ by bf16 roundings along the chains of
// tests/gpt_test.cu's Bf16StepMatchesFp32OfTheSameBf16Weights (46 roundings, 7.7e-3 of a tensor's
// scale at one standard deviation), bounded as there by 3.8e-2; the loss by one bf16 ulp, 2^-8.
TEST(GPTFusedAttention, MatchesMaterializedInBf16) {
  expect_fused_matches_materialized<__nv_bfloat16>(1.0 / 256, 3.8e-2);
}

// The whole model's gradient with the fused attention against central differences in double,
// 8 random entries of each tensor and its largest (as GPT.WholeModelGradientMatchesFiniteDifferences).
TEST(GPTFusedAttention, WholeModelGradientMatchesFiniteDifferences) {
  std::vector<double> host_params = test_parameters(22);
  WholeModel<double> model(host_params, AttentionKind::fused);
  model.loss(host_params);
  const std::vector<double> analytic = model.gradient();
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(kConfig);
  const auto live = [&](int tensor) {
    return tensor == kWte ? size_t(kConfig.vocab_size) * kConfig.channels : sizes[tensor];
  };
  const auto errors = sampled_gradient_errors(
      kConfig, host_params, analytic, [&](const std::vector<double>& v) { return model.loss(v); }, live, 23);
  // Double throughout; the difference quotient's rounding, 2^-53 |loss| / h = 5e-11 for the loss
  // of 2.4, is the limit: against ln1b's error floor (1e-3 of its largest gradient, 6e-3) that is
  // 8e-6, so the bound is 3e-5 (the materialised attention measures 3.7e-6 here, the fused 5.2e-6;
  // a wrong formula is off by O(1)).
  for (int tensor = 0; tensor < kNumParameterTensors; ++tensor)
    EXPECT_LE(errors[tensor], 3e-5) << parameter_tensor_name(tensor);
}

// With every piece a multiple of the 256-byte alignment (B T = 64 tokens), the fused activations
// are the materialised ones less, per block, the B NH T T probabilities plus one log-sum-exp per
// row, and less the shared forward buffers (qkv, and the attention's scratch beyond a projection)
// that each block's kept qkv replaces; the backward scratch less the materialised attention's
// (3 B T C + B NH T T) plus the fused one's B NH T. What create allocates, exactly.
TEST(GPTFusedAttention, ActivationAndScratchBytesShrinkByTheProbabilities) {
  const GPTConfig config = make_gpt_config(2, 2, 32, 32, 11);
  const int B = 2, T = 32, L = config.num_layers, NH = config.num_heads;
  const size_t BT = size_t(B) * T, C = config.channels, f = sizeof(float);
  const LayerRange whole = whole_model(config);
  const size_t materialized = activation_bytes<float>(config, B, T, whole, 1, AttentionKind::materialized);
  const size_t fused = activation_bytes<float>(config, B, T, whole, 1, AttentionKind::fused);
  const size_t probabilities = size_t(B) * NH * T * T, rows = size_t(B) * NH * T;
  EXPECT_EQ(materialized - fused, (L * (probabilities - rows) + 3 * BT * C) * f);
  const size_t scratch_materialized =
      backward_scratch_bytes<float>(config, B, T, whole, 1, AttentionKind::materialized);
  const size_t scratch_fused = backward_scratch_bytes<float>(config, B, T, whole, 1, AttentionKind::fused);
  EXPECT_EQ(scratch_materialized - scratch_fused, (3 * BT * C + probabilities - rows) * f);
  const DeviceMemoryCounts before = device_memory_counts();
  Activations<float> acts = create_activations<float>(config, B, T, whole, 1, AttentionKind::fused);
  EXPECT_EQ(device_memory_counts().bytes_in_use - before.bytes_in_use, fused);
  EXPECT_EQ(acts.bytes, fused);
  BackwardScratch<float> scratch = create_backward_scratch<float>(config, B, T, whole, 1, AttentionKind::fused);
  EXPECT_EQ(device_memory_counts().bytes_in_use - before.bytes_in_use, fused + scratch_fused);
  destroy_backward_scratch(scratch);
  destroy_activations(acts);
  EXPECT_EQ(device_memory_counts().bytes_in_use, before.bytes_in_use);
}

// Activations of one attention and a scratch of the other are refused in one line.
TEST(GPTFusedAttention, ScratchOfTheOtherAttentionIsRefused) {
  const std::vector<double> host_params = test_parameters(24);
  WholeModel<float> model(host_params, AttentionKind::fused);
  model.loss(host_params);
  BackwardScratch<float> other =
      create_backward_scratch<float>(kConfig, kB, kT, whole_model(kConfig), 1, AttentionKind::materialized);
  std::swap(model.scratch, other);
  EXPECT_THROW(model.gradient(), std::runtime_error);
  std::swap(model.scratch, other);
  destroy_backward_scratch(other);
}
