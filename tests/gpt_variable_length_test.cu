// Checks of the GPT at a per-microbatch T with padded, masked positions (issue 34 item 3,
// model/gpt.cuh): buffers made once for maxT, each microbatch at its own T, padding at a row's end
// with target kIgnoredTarget, the loss scaled by 1 / the step's real tokens. The whole model's
// gradient against finite differences in double at T < maxT; a step's loss and gradient the same
// however its sequences are split into microbatches; padded positions contributing nothing, bit for
// bit; a short microbatch in buffers made for maxT (after a longer one filled them) bitwise the same
// microbatch in buffers of its own size; the split backward (I then W) bitwise the whole one at T <
// maxT. Each with both attentions (T 3 to 13 with maxT 16: not multiples of the fused tiles).
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/classifier.cuh"
#include "kernels/device_memory.cuh"
#include "model/gpt.cuh"
#include "model/parameters.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/sampled_model_gradient.h"

namespace {

// L=2, NH=2, C=32 (heads of 16 channels, which the fused attention takes), maxT=16, V=11 (Vp=128).
const GPTConfig kConfig = make_gpt_config(2, 2, 32, 16, 11);
constexpr int kMaxB = 4;
const AttentionKind kAttentions[] = {AttentionKind::materialized, AttentionKind::fused};

const char* name_of(AttentionKind kind) { return kind == AttentionKind::fused ? "fused" : "materialized"; }

// GPT-2's initialisation plus uniform noise in [-0.1, 0.1), so that biases, LayerNorm
// parameters and wte's padded rows are not at special values.
std::vector<double> test_parameters(uint64_t seed) {
  std::vector<float> init;
  init_gpt2_parameters(init, kConfig, seed);
  std::vector<double> params = random_values(init.size(), seed + 1, -0.1, 0.1);
  for (size_t i = 0; i < params.size(); ++i) params[i] += init[i];
  return params;
}

// One sequence's real positions: its input tokens and their targets.
struct Sequence {
  std::vector<int> tokens, targets;
};

Sequence random_sequence(int length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Sequence s;
  for (int t = 0; t < length; ++t) {
    s.tokens.push_back(int(rng() % uint64_t(kConfig.vocab_size)));
    s.targets.push_back(int(rng() % uint64_t(kConfig.vocab_size)));
  }
  return s;
}

// A microbatch as trainer/data/documents.h makes one: its sequences as rows, T the longest, the
// shorter rows padded at their end with input padding_token and target kIgnoredTarget.
struct Microbatch {
  int B, T;
  std::vector<int> tokens, targets;  // (B, T)
};

Microbatch pad(const std::vector<Sequence>& rows, int padding_token = 0) {
  Microbatch m{int(rows.size()), 0, {}, {}};
  for (const Sequence& row : rows) m.T = std::max(m.T, int(row.tokens.size()));
  for (const Sequence& row : rows)
    for (int t = 0; t < m.T; ++t) {
      const bool real = t < int(row.tokens.size());
      m.tokens.push_back(real ? row.tokens[t] : padding_token);
      m.targets.push_back(real ? row.targets[t] : kIgnoredTarget);
    }
  return m;
}

size_t real_tokens(const std::vector<Microbatch>& step) {
  size_t count = 0;
  for (const Microbatch& m : step) count += std::count_if(m.targets.begin(), m.targets.end(), [](int target) {
      return target != kIgnoredTarget;
    });
  return count;
}

// What a step gives: its loss (the mean over its real tokens), every microbatch's per-position
// losses in order, and the gradient of all parameters (wte's two shares summed).
template <typename Element>
struct StepResult {
  double loss = 0.0;
  std::vector<Compute<Element>> losses;
  std::vector<Element> gradient;
};

enum class Backward { whole, input_then_weight };

// The whole model in buffers made once for (B, T), running steps of microbatches of any B, T
// within them, as a pipeline's single stage would.
template <typename Element>
struct Model {
  const LayerRange range = whole_model(kConfig);
  DeviceBuffer<Element> params, grads, grad_wte_head;
  Activations<Element> acts;
  BackwardScratch<Element> scratch;
  WeightGradientInputs<Element> w;
  CublasHandle cublas;
  cudaStream_t stream = nullptr;

  Model(const std::vector<double>& host_params, AttentionKind attention, int B = kMaxB, int T = kConfig.max_seq_len)
      : params(convert<Element>(host_params)),
        grads(host_params.size()),
        grad_wte_head(size_t(kConfig.padded_vocab_size) * kConfig.channels),
        acts(create_activations<Element>(kConfig, B, T, range, 1, attention)),
        scratch(create_backward_scratch<Element>(kConfig, B, T, range, 1, attention)),
        w(create_weight_gradient_inputs<Element>(kConfig, B, T, range)) {}
  ~Model() {
    destroy_activations(acts);
    destroy_backward_scratch(scratch);
    destroy_weight_gradient_inputs(w);
  }
  ParameterTensors<Element> views(DeviceBuffer<Element>& buffer) { return point_views(buffer.data(), kConfig); }

  // One microbatch's forward with loss_scale; returns the sum of its losses.
  double forward(const Microbatch& m, const DeviceBuffer<int>& tokens, const DeviceBuffer<int>& targets,
                 double loss_scale) {
    gpt_forward(kConfig, range, views(params), acts, tokens.data(), nullptr, targets.data(), loss_scale, m.B, m.T,
                cublas.get(), stream);
    return loss_sum(acts, m.B, m.T, stream);
  }

  StepResult<Element> step(const std::vector<Microbatch>& microbatches, Backward backward = Backward::whole) {
    grads.upload(std::vector<Element>(grads.size(), Element(0.0f)));
    grad_wte_head.upload(std::vector<Element>(grad_wte_head.size(), Element(0.0f)));
    const double scale = 1.0 / double(real_tokens(microbatches));
    StepResult<Element> result;
    for (const Microbatch& m : microbatches) {
      DeviceBuffer<int> tokens(m.tokens), targets(m.targets);
      result.loss += forward(m, tokens, targets, scale);
      std::vector<Compute<Element>> losses(size_t(m.B) * m.T);
      CUDA_CHECK(cudaMemcpy(losses.data(), acts.losses, losses.size() * sizeof(losses[0]), cudaMemcpyDeviceToHost));
      result.losses.insert(result.losses.end(), losses.begin(), losses.end());
      if (backward == Backward::whole) {
        gpt_backward(kConfig, range, views(params), views(grads), grad_wte_head.data(), acts, scratch, tokens.data(),
                     nullptr, nullptr, nullptr, m.B, m.T, cublas.get(), stream);
      } else {
        gpt_backward_input(kConfig, range, views(params), acts, scratch, tokens.data(), nullptr, nullptr, nullptr, w,
                           m.B, m.T, cublas.get(), stream);
        gpt_backward_weight(kConfig, range, views(grads), grad_wte_head.data(), w, scratch, m.B, m.T, cublas.get(),
                            stream);
      }
    }
    result.loss *= scale;
    sum_tied_embedding_gradient(kConfig, views(grads).wte, grad_wte_head.data(), stream);
    result.gradient = grads.to_host();
    return result;
  }
};

template <typename Element>
bool bitwise_equal(const std::vector<Element>& a, const std::vector<Element>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(Element)) == 0);
}

// Sequences of the given lengths, seeded by their index, so that a step built from the same
// indices holds the same tokens however they are grouped.
std::vector<Sequence> sequences(const std::vector<int>& lengths) {
  std::vector<Sequence> all;
  for (size_t i = 0; i < lengths.size(); ++i) all.push_back(random_sequence(lengths[i], 500 + i));
  return all;
}

}  // namespace

// Double throughout, one microbatch of B = 2 at T = 7 in buffers for maxT = 16, its second row a
// sequence of 4 padded with 3 masked positions: d(sum of losses / 11 real tokens) / d parameter by
// central differences (h = 1e-5, good to ~1e-9) at 8 random entries and the largest of each tensor.
// The positions T..maxT-1 take no part: wpe's rows there get exactly 0.
TEST(GPTVariableLength, GradientAtShortTWithPaddingMatchesFiniteDifferences) {
  const std::vector<Sequence> rows = sequences({7, 4});
  const Microbatch m = pad(rows);
  ASSERT_EQ(m.T, 7);
  for (AttentionKind attention : kAttentions) {
    SCOPED_TRACE(name_of(attention));
    std::vector<double> host_params = test_parameters(7);
    Model<double> model(host_params, attention);
    const StepResult<double> analytic = model.step({m});
    DeviceBuffer<int> tokens(m.tokens), targets(m.targets);
    auto loss_of = [&](const std::vector<double>& values) {
      model.params.upload(values);
      return model.forward(m, tokens, targets, 1.0) / 11.0;
    };
    // wte's padded rows and wpe's rows past T have gradient 0 (checked below): sample the live rows.
    const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(kConfig);
    const auto live = [&](int tensor) {
      return tensor == kWte   ? size_t(kConfig.vocab_size) * kConfig.channels
             : tensor == kWpe ? size_t(m.T) * kConfig.channels
                              : sizes[tensor];
    };
    const auto errors = sampled_gradient_errors(kConfig, host_params, analytic.gradient, loss_of, live, 11);
    for (int tensor = 0; tensor < kNumParameterTensors; ++tensor)
      EXPECT_LE(errors[tensor], 1e-6) << parameter_tensor_name(tensor);
    const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kConfig);
    const auto unused_positions = analytic.gradient.begin() + offsets[kWpe] + size_t(m.T) * kConfig.channels;
    EXPECT_TRUE(std::all_of(unused_positions, analytic.gradient.begin() + offsets[kWpe] + sizes[kWpe],
                            [](double g) { return g == 0.0; }))
        << "wpe's rows T..maxT-1";
  }
}

// Sequences of 5, 3, 8 and 6 tokens (22 real ones) as one microbatch of B = 4 at T = 8, as two of
// B = 2 at T = 5 and 8, and as two at T = 8 and 6: the step's loss (the mean over the 22) and its
// gradient agree. In double the three sum the same terms in other orders (the microbatches' sums
// and the matrix products' inner sums over B T rows): a relative difference of a few 1e-16 per
// addition over at most a few hundred terms: measured 2e-16 for the loss, 6e-14 for the gradient
// (relative to each tensor's scale, max_relative_error); the bound 1e-11 leaves a margin for other
// BLAS orders, and a masked token counted in the loss or the normaliser moves both by about 1/22.
TEST(GPTVariableLength, StepDoesNotDependOnHowItsTokensAreSplitIntoMicrobatches) {
  const std::vector<Sequence> s = sequences({5, 3, 8, 6});
  const std::vector<std::vector<Microbatch>> splits = {
      {pad({s[0], s[1], s[2], s[3]})}, {pad({s[0], s[1]}), pad({s[2], s[3]})}, {pad({s[0], s[2]}), pad({s[1], s[3]})}};
  ASSERT_EQ(splits[1][0].T, 5);
  ASSERT_EQ(splits[2][1].T, 6);
  for (AttentionKind attention : kAttentions) {
    SCOPED_TRACE(name_of(attention));
    Model<double> model(test_parameters(8), attention);
    const StepResult<double> one = model.step(splits[0]);
    for (size_t split = 1; split < splits.size(); ++split) {
      const StepResult<double> other = model.step(splits[split]);
      EXPECT_NEAR(other.loss, one.loss, 1e-11 * one.loss) << "split " << split;
      EXPECT_LE(max_relative_error(other.gradient, one.gradient), 1e-11) << "split " << split;
    }
  }
}

// The padded positions' input tokens (0 or any other) change nothing, bit for bit, in fp32: their
// loss is 0, their rows of the logits' gradient are 0, and causal attention keeps every real
// position blind to them, so the real positions' losses and the gradient are the same bits.
TEST(GPTVariableLength, PaddedPositionsContributeNothing) {
  const std::vector<Sequence> s = sequences({9, 2, 6});
  for (AttentionKind attention : kAttentions) {
    SCOPED_TRACE(name_of(attention));
    Model<float> model(test_parameters(9), attention);
    const StepResult<float> zeros = model.step({pad(s, 0)});
    const StepResult<float> other = model.step({pad(s, 7)});
    EXPECT_TRUE(bitwise_equal(other.losses, zeros.losses));
    EXPECT_TRUE(bitwise_equal(other.gradient, zeros.gradient));
    const Microbatch m = pad(s);
    for (size_t i = 0; i < m.targets.size(); ++i)
      if (m.targets[i] == kIgnoredTarget) {
        EXPECT_EQ(zeros.losses[i], 0.0f) << "position " << i;
      }
  }
}

// A short microbatch (B = 2, T = 7) in buffers made for B = 4, maxT = 16, run after a full-size one
// left its values in them, is bitwise the same microbatch in buffers made for (2, 7): it reads the
// first B T rows of each buffer and nothing beyond. In fp32, for the whole backward and for I then
// W, which also agree with each other bitwise at T < maxT.
TEST(GPTVariableLength, ShortMicrobatchInMaxTBuffersIsBitwiseItsOwnSize) {
  const std::vector<double> host_params = test_parameters(10);
  const Microbatch full = pad(sequences({16, 16, 16, 16}));
  const Microbatch short_one = pad(sequences({7, 3}));
  for (AttentionKind attention : kAttentions) {
    SCOPED_TRACE(name_of(attention));
    Model<float> large(host_params, attention);
    large.step({full});
    Model<float> exact(host_params, attention, short_one.B, short_one.T);
    const StepResult<float> expected = exact.step({short_one});
    for (Backward backward : {Backward::whole, Backward::input_then_weight}) {
      const StepResult<float> in_large = large.step({short_one}, backward);
      const char* what = backward == Backward::whole ? "whole backward" : "I then W";
      EXPECT_TRUE(bitwise_equal(in_large.losses, expected.losses)) << what;
      EXPECT_TRUE(bitwise_equal(in_large.gradient, expected.gradient)) << what;
    }
  }
}
