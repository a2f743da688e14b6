// Checks of the GPT-2 layer-range forward and backward (model/gpt.cuh): the whole model's
// gradient against finite differences in double, bitwise equality of any split of the
// model into ranges, the backward split into I and W bitwise equal to the whole backward, the
// activation and weight-gradient-input bytes against what is allocated, no allocation inside
// forward and backward, and a repeated forward (recompute) reproducing the activations.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cublas_check.cuh"
#include "kernels/device_memory.cuh"
#include "model/gpt.cuh"
#include "model/parameters.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/file_tools.h"
#include "tests/gradient_check.h"
#include "tests/sampled_model_gradient.h"
#include "tests/scaled_error.h"

namespace {

// The issue's tiny model: L=2, NH=2, C=8, maxT=5, V=11 (Vp=128); microbatches of B=2, T=5.
const GPTConfig kTiny = make_gpt_config(2, 2, 8, 5, 11);
constexpr int kB = 2, kT = 5;

// GPT-2's initialisation plus uniform noise in [-0.1, 0.1), so that biases, LayerNorm
// parameters and wte's padded rows are not at special values.
std::vector<double> test_parameters(const GPTConfig& config, uint64_t seed) {
  std::vector<float> init;
  init_gpt2_parameters(init, config, seed);
  std::vector<double> params = random_values(init.size(), seed + 1, -0.1, 0.1);
  for (size_t i = 0; i < params.size(); ++i) params[i] += init[i];
  return params;
}

// count token ids uniform in [0, V).
std::vector<int> random_tokens(size_t count, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> tokens(count);
  for (int& token : tokens) token = int(rng() % uint64_t(V));
  return tokens;
}

// One microbatch's data: tokens (B, T) and targets (B, T).
struct Microbatch {
  DeviceBuffer<int> tokens, targets;
  explicit Microbatch(uint64_t seed)
      : tokens(random_tokens(kB * kT, kTiny.vocab_size, seed)),
        targets(random_tokens(kB * kT, kTiny.vocab_size, seed + 1000)) {}
};

template <typename Element>
bool bitwise_equal(const std::vector<Element>& a, const std::vector<Element>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(Element)) == 0);
}

// A model cut into consecutive ranges, run as a pipeline would but in one process: per
// microbatch, the ranges' forwards in order with each range's output as the next one's input,
// then their backwards in reverse with each input gradient as the previous one's output gradient.
template <typename Element>
struct CutModel {
  const GPTConfig config;
  const std::vector<LayerRange> ranges;
  DeviceBuffer<Element> params, grads, grad_wte_head;
  std::vector<Activations<Element>> acts;
  std::vector<BackwardScratch<Element>> scratch;
  std::vector<DeviceBuffer<Element>*> grad_inputs;  // (B, T, C) of each range but the first
  CublasHandle cublas;
  cudaStream_t stream = nullptr;

  CutModel(const GPTConfig& config, const std::vector<LayerRange>& ranges, const std::vector<double>& host_params)
      : config(config),
        ranges(ranges),
        params(convert<Element>(host_params)),
        grads(std::vector<Element>(host_params.size(), Element(0.0f))),
        grad_wte_head(std::vector<Element>(size_t(config.padded_vocab_size) * config.channels, Element(0.0f))) {
    for (const LayerRange& range : ranges) {
      acts.push_back(create_activations<Element>(config, kB, kT, range));
      scratch.push_back(create_backward_scratch<Element>(config, kB, kT, range));
      grad_inputs.push_back(range.has_embedding ? nullptr
                                                : new DeviceBuffer<Element>(size_t(kB) * kT * config.channels));
    }
  }
  ~CutModel() {
    for (size_t i = 0; i < ranges.size(); ++i) {
      destroy_activations(acts[i]);
      destroy_backward_scratch(scratch[i]);
      delete grad_inputs[i];
    }
  }
  ParameterTensors<Element> param_views() { return point_views(params.data(), config); }
  ParameterTensors<Element> grad_views() { return point_views(grads.data(), config); }

  void forward(const Microbatch& batch, double loss_scale, bool with_targets = true) {
    for (size_t i = 0; i < ranges.size(); ++i)
      gpt_forward(config, ranges[i], param_views(), acts[i], i == 0 ? batch.tokens.data() : nullptr,
                  i == 0 ? nullptr : range_output(acts[i - 1]), with_targets ? batch.targets.data() : nullptr,
                  loss_scale, kB, kT, cublas.get(), stream);
  }
  void backward(const Microbatch& batch) {
    for (size_t i = ranges.size(); i-- > 0;)
      gpt_backward(config, ranges[i], param_views(), grad_views(), grad_wte_head.data(), acts[i], scratch[i],
                   i == 0 ? batch.tokens.data() : nullptr, i == 0 ? nullptr : range_output(acts[i - 1]),
                   i + 1 == ranges.size() ? nullptr : grad_inputs[i + 1]->data(),
                   i == 0 ? nullptr : grad_inputs[i]->data(), kB, kT, cublas.get(), stream);
  }
  // The backward's I of every range (in reverse), filling w[i] for range i.
  void backward_input(const Microbatch& batch, std::vector<WeightGradientInputs<Element>>& w) {
    for (size_t i = ranges.size(); i-- > 0;)
      gpt_backward_input(config, ranges[i], param_views(), acts[i], scratch[i], i == 0 ? batch.tokens.data() : nullptr,
                         i == 0 ? nullptr : range_output(acts[i - 1]),
                         i + 1 == ranges.size() ? nullptr : grad_inputs[i + 1]->data(),
                         i == 0 ? nullptr : grad_inputs[i]->data(), w[i], kB, kT, cublas.get(), stream);
  }
  void backward_weight(const std::vector<WeightGradientInputs<Element>>& w) {
    for (size_t i = ranges.size(); i-- > 0;)
      gpt_backward_weight(config, ranges[i], grad_views(), grad_wte_head.data(), w[i], scratch[i], kB, kT,
                          cublas.get(), stream);
  }
  // Every range's input gradient of the last backward, in range order.
  std::vector<Element> input_gradients() {
    std::vector<Element> all;
    for (const DeviceBuffer<Element>* g : grad_inputs)
      if (g != nullptr) {
        const std::vector<Element> one = g->to_host();
        all.insert(all.end(), one.begin(), one.end());
      }
    return all;
  }
  double mean_loss_of_last_forward() { return mean_loss(acts.back(), kB, kT, stream); }
  std::vector<Compute<Element>> losses_of_last_forward() {
    std::vector<Compute<Element>> losses(size_t(kB) * kT);
    CUDA_CHECK(
        cudaMemcpy(losses.data(), acts.back().losses, losses.size() * sizeof(losses[0]), cudaMemcpyDeviceToHost));
    return losses;
  }
};

// The result of one training step's forwards and backwards over microbatches.
template <typename Element>
struct StepResult {
  std::vector<Compute<Element>> losses;  // every microbatch's per-token losses, in order
  std::vector<Element> gradient;         // all parameters, wte's two shares summed
  std::vector<Element> grad_wte_head;    // the output projection's share of wte's gradient
  std::vector<Element> input_gradients;  // every microbatch's ranges' input gradients, in order
};

// How a step runs each microbatch's backward: whole (B); split with each W right after its I;
// split with every I first and the W's after all of them, in microbatch order (as a pipeline
// defers them: the activations W would have read are overwritten by then).
enum class Backward { whole, input_then_weight, weights_deferred };

template <typename Element>
StepResult<Element> run_step(const std::vector<LayerRange>& ranges, const std::vector<double>& host_params,
                             int microbatches, Backward backward = Backward::whole) {
  CutModel<Element> model(kTiny, ranges, host_params);
  StepResult<Element> result;
  std::vector<std::vector<WeightGradientInputs<Element>>> w(microbatches);
  for (int k = 0; k < microbatches; ++k)
    for (const LayerRange& range : ranges) w[k].push_back(create_weight_gradient_inputs<Element>(kTiny, kB, kT, range));
  for (int k = 0; k < microbatches; ++k) {
    const Microbatch batch(100 + k);
    model.forward(batch, 1.0 / (kB * kT * microbatches));
    if (backward == Backward::whole) {
      model.backward(batch);
    } else {
      model.backward_input(batch, w[k]);
      if (backward == Backward::input_then_weight) model.backward_weight(w[k]);
    }
    const std::vector<Element> input_gradients = model.input_gradients();
    result.input_gradients.insert(result.input_gradients.end(), input_gradients.begin(), input_gradients.end());
    const std::vector<Compute<Element>> losses = model.losses_of_last_forward();
    result.losses.insert(result.losses.end(), losses.begin(), losses.end());
  }
  if (backward == Backward::weights_deferred)
    for (int k = 0; k < microbatches; ++k) model.backward_weight(w[k]);
  for (std::vector<WeightGradientInputs<Element>>& buffers : w)
    for (WeightGradientInputs<Element>& buffer : buffers) destroy_weight_gradient_inputs(buffer);
  result.grad_wte_head = model.grad_wte_head.to_host();
  sum_tied_embedding_gradient(kTiny, model.grad_views().wte, model.grad_wte_head.data(), model.stream);
  result.gradient = model.grads.to_host();
  return result;
}

const std::vector<LayerRange> kWhole = {whole_model(kTiny)};
const std::vector<LayerRange> kTwoStages = {{0, 1, true, false}, {1, 2, false, true}};
// Embedding and head alone, each block a stage of its own.
const std::vector<LayerRange> kFourStages = {
    {0, 0, true, false}, {0, 1, false, false}, {1, 2, false, false}, {2, 2, false, true}};

}  // namespace

TEST(GPT, WholeModelGradientMatchesFiniteDifferences) {
  std::vector<double> host_params = test_parameters(kTiny, 7);
  const StepResult<double> analytic = run_step<double>(kWhole, host_params, 1);

  CutModel<double> model(kTiny, kWhole, host_params);
  const Microbatch batch(100);  // run_step's first microbatch
  auto loss_of = [&](const std::vector<double>& values) {
    model.params.upload(values);
    model.forward(batch, 1.0);
    return model.mean_loss_of_last_forward();
  };
  // wte's rows V..Vp-1 are padding, whose gradient is zero (checked below): sample the vocabulary's rows.
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(kTiny);
  const auto live = [&](int tensor) { return tensor == kWte ? size_t(kTiny.vocab_size) * kTiny.channels : sizes[tensor]; };
  const auto errors = sampled_gradient_errors(kTiny, host_params, analytic.gradient, loss_of, live, 11);
  // Double precision throughout: central differences with h = 1e-5 are good to ~1e-9.
  for (int tensor = 0; tensor < kNumParameterTensors; ++tensor)
    EXPECT_LE(errors[tensor], 1e-6) << parameter_tensor_name(tensor);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kTiny);
  const auto padded_rows = analytic.gradient.begin() + offsets[kWte] + size_t(kTiny.vocab_size) * kTiny.channels;
  EXPECT_TRUE(std::all_of(padded_rows, analytic.gradient.begin() + offsets[kWpe], [](double g) { return g == 0.0; }));
}

TEST(GPT, SplittingTheModelIsBitwiseFree) {
  const std::vector<double> host_params = test_parameters(kTiny, 8);
  for (int microbatches : {1, 3}) {
    const StepResult<float> whole = run_step<float>(kWhole, host_params, microbatches);
    for (const std::vector<LayerRange>& ranges : {kTwoStages, kFourStages}) {
      const StepResult<float> split = run_step<float>(ranges, host_params, microbatches);
      const std::string what =
          std::to_string(ranges.size()) + " ranges, " + std::to_string(microbatches) + " microbatches";
      EXPECT_TRUE(bitwise_equal(split.losses, whole.losses)) << what;
      EXPECT_TRUE(bitwise_equal(split.grad_wte_head, whole.grad_wte_head)) << what;
      EXPECT_TRUE(bitwise_equal(split.gradient, whole.gradient)) << what;
    }
  }
}

// I then W (gpt_backward_input, gpt_backward_weight) gives what B gives, bit for bit: the
// gradients, the head's share of wte's, every range's input gradient and the losses, for the
// whole model and for the model cut in two and in four (embedding alone, each block, head alone),
// with 1 and 3 microbatches, each W right after its I or all of them after every I. In fp32 and
// in bf16 (the zero-bubble schedules' bf16 runs rest on it).
template <typename Element>
void expect_input_then_weight_is_the_whole_backward() {
  const std::vector<double> host_params = test_parameters(kTiny, 13);
  for (int microbatches : {1, 3})
    for (const std::vector<LayerRange>& ranges : {kWhole, kTwoStages, kFourStages}) {
      const StepResult<Element> whole = run_step<Element>(ranges, host_params, microbatches);
      for (Backward backward : {Backward::input_then_weight, Backward::weights_deferred}) {
        const StepResult<Element> split = run_step<Element>(ranges, host_params, microbatches, backward);
        const std::string what = std::to_string(ranges.size()) + " ranges, " + std::to_string(microbatches) +
                                 " microbatches" + (backward == Backward::weights_deferred ? ", W's deferred" : "");
        EXPECT_TRUE(bitwise_equal(split.gradient, whole.gradient)) << what;
        EXPECT_TRUE(bitwise_equal(split.grad_wte_head, whole.grad_wte_head)) << what;
        EXPECT_TRUE(bitwise_equal(split.input_gradients, whole.input_gradients)) << what;
        EXPECT_TRUE(bitwise_equal(split.losses, whole.losses)) << what;
      }
    }
}

TEST(GPT, InputThenWeightGradientIsTheWholeBackwardBitwise) {
  expect_input_then_weight_is_the_whole_backward<float>();
  SCOPED_TRACE("bf16");
  expect_input_then_weight_is_the_whole_backward<__nv_bfloat16>();
}

// What W reads, per token: 20 C elements and 4 statistics a block (model/gpt.cuh), the tokens
// and C for the embedding, 3 C + Vp elements and 2 statistics for the head; here every piece is
// a multiple of the 256-byte alignment, so the bytes are exactly the sum. What create allocates.
TEST(GPT, WeightGradientInputBytesAreAsStatedAndAllocated) {
  const GPTConfig config = make_gpt_config(2, 2, 8, 32, 11);  // B T = 64 tokens: 256 bytes of floats
  const int B = 2, T = 32;
  const size_t BT = size_t(B) * T, C = config.channels, Vp = config.padded_vocab_size, f = sizeof(float);
  const size_t block = BT * (20 * C + 4) * f, embedding = BT * sizeof(int) + BT * C * f, head = BT * (3 * C + Vp + 2) * f;
  EXPECT_EQ(weight_gradient_input_bytes<float>(config, B, T, {0, 2, true, true}), embedding + 2 * block + head);
  EXPECT_EQ(weight_gradient_input_bytes<float>(config, B, T, {1, 2, false, false}), block);
  EXPECT_EQ(weight_gradient_input_bytes<float>(config, B, T, {2, 2, false, true}), head);
  const DeviceMemoryCounts before = device_memory_counts();
  WeightGradientInputs<float> w = create_weight_gradient_inputs<float>(config, B, T, {0, 2, true, true});
  EXPECT_EQ(device_memory_counts().bytes_in_use - before.bytes_in_use, w.bytes);
  EXPECT_EQ(w.bytes, embedding + 2 * block + head);
  destroy_weight_gradient_inputs(w);
  EXPECT_EQ(device_memory_counts().bytes_in_use, before.bytes_in_use);
}

// Counted by the project's allocator (kernels/device_memory.cuh), exact on a GPU as here:
// cudaMemGetInfo would see the driver's 2 MiB granularity instead.
TEST(GPT, ActivationBytesAreWhatIsAllocated) {
  for (const std::vector<LayerRange>& ranges : {kWhole, kFourStages})
    for (const LayerRange& range : ranges) {
      const DeviceMemoryCounts before = device_memory_counts();
      Activations<float> acts = create_activations<float>(kTiny, kB, kT, range);
      const DeviceMemoryCounts after = device_memory_counts();
      const size_t expected = activation_bytes<float>(kTiny, kB, kT, range);
      EXPECT_EQ(acts.bytes, expected);
      EXPECT_EQ(after.bytes_in_use - before.bytes_in_use, expected);
      EXPECT_EQ(after.allocations - before.allocations, 1u);
      destroy_activations(acts);
      EXPECT_EQ(device_memory_counts().bytes_in_use, before.bytes_in_use);
    }
}

TEST(GPT, StageInputBytesAreTokensOrOneActivation) {
  EXPECT_EQ(stage_input_bytes<float>(kTiny, kB, kT, kTwoStages[0]), size_t(kB) * kT * sizeof(int));
  EXPECT_EQ(stage_input_bytes<float>(kTiny, kB, kT, kTwoStages[1]), size_t(kB) * kT * kTiny.channels * sizeof(float));
}

// The project's allocation count, which cuBLAS's lazy workspace on a GPU does not touch, so
// even the first forward and backward are checked; an allocation freed again within them
// would still raise the count.
TEST(GPT, ForwardAndBackwardAllocateNothing) {
  CutModel<float> model(kTiny, kTwoStages, test_parameters(kTiny, 9));
  const Microbatch batch(100);
  std::vector<WeightGradientInputs<float>> w;
  for (const LayerRange& range : kTwoStages) w.push_back(create_weight_gradient_inputs<float>(kTiny, kB, kT, range));
  const DeviceMemoryCounts before = device_memory_counts();
  for (int step = 0; step < 2; ++step) {
    model.forward(batch, 1.0);
    model.backward(batch);
    model.forward(batch, 1.0);
    model.backward_input(batch, w);
    model.backward_weight(w);
  }
  const DeviceMemoryCounts after = device_memory_counts();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  for (WeightGradientInputs<float>& buffer : w) destroy_weight_gradient_inputs(buffer);
}

TEST(GPT, RepeatedForwardReproducesActivationsBitwise) {
  CutModel<float> model(kTiny, kTwoStages, test_parameters(kTiny, 10));
  for (const Activations<float>& acts : model.acts) CUDA_CHECK(cudaMemset(acts.memory, 0, acts.bytes));
  const Microbatch batch(100), other(200);
  auto snapshot = [&](size_t i) {
    std::vector<unsigned char> bytes(model.acts[i].bytes);
    CUDA_CHECK(cudaMemcpy(bytes.data(), model.acts[i].memory, bytes.size(), cudaMemcpyDeviceToHost));
    return bytes;
  };
  model.forward(batch, 1.0);
  const std::vector<unsigned char> first_stage = snapshot(0), last_stage = snapshot(1);
  model.forward(other, 1.0);  // another microbatch overwrites the slots
  model.forward(batch, 1.0);  // recompute
  EXPECT_TRUE(bitwise_equal(snapshot(0), first_stage));
  EXPECT_TRUE(bitwise_equal(snapshot(1), last_stage));
}

TEST(GPT, Bf16LossIsNearFloatLoss) {
  const std::vector<double> host_params = test_parameters(kTiny, 12);
  const Microbatch batch(100);
  CutModel<float> fp32(kTiny, kWhole, host_params);
  CutModel<__nv_bfloat16> bf16(kTiny, kWhole, host_params);
  fp32.forward(batch, 1.0);
  bf16.forward(batch, 1.0);
  const double expected = fp32.mean_loss_of_last_forward();
  // bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 2e-3) at every stored activation;
  // a dozen roundings in a row stay within 2e-2.
  EXPECT_NEAR(bf16.mean_loss_of_last_forward(), expected, 2e-2 * expected);
}

// Step 1 of bf16 training at the model level: the loss and every parameter gradient of the
// bf16 model (bf16 activations, gradients and accumulation; fp32 statistics, softmax, loss and
// sums) against the fp32 model of the same weights, rounded to bf16 first so that only the
// arithmetic differs. Two microbatches, so the bf16 accumulation of gradients is in it.
// Tolerances from bf16's precision: a value stored in bf16 is off by up to 2^-9 of itself
// (round to nearest, 8 significant bits), uniformly, so by 2^-9 / sqrt(3) at one standard
// deviation. The longest chain from a weight to the loss stores K = 8 L + 6 = 22 values (per
// block ln1, qkv, the attention's saved q, k, v and probabilities, its output, residual2, ln2,
// fch, fch_gelu, residual3; and the embedding, lnf, logits), the backward as many again plus a
// rounding of each microbatch's gradient sum: 2 K + 2 = 46. Independent roundings add in
// quadrature: a gradient is off by sqrt(46) 2^-9 / sqrt(3) = 7.7e-3 of its tensor's scale at one
// standard deviation, and the bound is 5 of them, 3.8e-2 (measured 1.6e-2 at most, ln1b). The
// loss is computed in fp32 from the bf16 logits, whose errors (sqrt(22) 2^-9 / sqrt(3) = 5.3e-3
// of a logit, the logits below 1 against a loss of 2.4) average over the 20 tokens: the bound is
// one bf16 ulp of the loss, 2^-8 (measured 1e-5). The bounds are for errors of another kind than
// rounding: bf16 weight gradients overwritten instead of accumulated over the two microbatches
// are off by 0.45 to 1.2 of their scale; rounding every bf16 store by truncation instead of to
// nearest (2.2e-2, loss 1.1e-4) stays inside.
TEST(GPT, Bf16StepMatchesFp32OfTheSameBf16Weights) {
  std::vector<double> host_params = test_parameters(kTiny, 13);
  host_params = to_double(convert<__nv_bfloat16>(host_params));
  const StepResult<float> fp32 = run_step<float>(kWhole, host_params, 2);
  const StepResult<__nv_bfloat16> bf16 = run_step<__nv_bfloat16>(kWhole, host_params, 2);
  double fp32_loss = 0, bf16_loss = 0;
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    fp32_loss += fp32.losses[i] / fp32.losses.size();
    bf16_loss += bf16.losses[i] / bf16.losses.size();
  }
  EXPECT_NEAR(bf16_loss, fp32_loss, std::ldexp(1.0, -8) * fp32_loss);
  const double gradient_bound = 5 * std::sqrt(46.0) * std::ldexp(1.0, -9) / std::sqrt(3.0);
  const std::vector<double> expected = to_double(fp32.gradient), got = to_double(bf16.gradient);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kTiny);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(kTiny);
  for (int tensor = 0; tensor < kNumParameterTensors; ++tensor) {
    const auto first = offsets[tensor], end = offsets[tensor] + sizes[tensor];
    EXPECT_LE(max_error_relative_to_scale({got.begin() + first, got.begin() + end},
                                          {expected.begin() + first, expected.begin() + end}),
              gradient_bound)
        << parameter_tensor_name(tensor);
  }
}

TEST(GPT, RejectsRangesOutsideTheModel) {
  EXPECT_EQ(error_of([] {
              validate_layer_range(kTiny, {1, 3, false, true});
            }),
            "layer range [1, 3) is not within the model's 2 layers");
  EXPECT_EQ(error_of([] {
              validate_layer_range(kTiny, {1, 1, false, false});
            }),
            "layer range [1, 1) has no blocks, no embedding and no head: it computes nothing");
}
