// Checks of the model's config (model/config.h) and of the parameter layout and
// initialisation (model/parameters.h): sizes against llm.c's counts, views against
// offsets counted by hand, the initial values against GPT-2's distributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "tests/file_tools.h"

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// L=2, NH=2, C=8, maxT=5, V=11 (Vp=128): 2824 parameters, counted by hand:
// wte 128*8 + wpe 5*8 + 2 * (ln1 2*8 + qkv 24*8+24 + attproj 8*8+8 + ln2 2*8 + fc 32*8+32 + fcproj 8*32+8) + lnf 2*8.
const GPTConfig kTiny = {5, 11, 128, 2, 2, 8};
constexpr size_t kTinyParameters = 2824;

}  // namespace

// ---- GPTConfig ----

TEST(GPTConfig, PadsVocabularyToAMultipleOf128) {
  EXPECT_EQ(make_gpt_config(12, 12, 768, 1024, 50257).padded_vocab_size, 50304);
  EXPECT_EQ(make_gpt_config(2, 2, 8, 5, 11).padded_vocab_size, 128);
  EXPECT_EQ(make_gpt_config(2, 2, 8, 5, 128).padded_vocab_size, 128);
  EXPECT_EQ(make_gpt_config(2, 2, 8, 5, 129).padded_vocab_size, 256);
}

TEST(GPTConfig, KeepsTheGivenFields) {
  const GPTConfig config = make_gpt_config(3, 4, 16, 7, 300);
  EXPECT_EQ(config.num_layers, 3);
  EXPECT_EQ(config.num_heads, 4);
  EXPECT_EQ(config.channels, 16);
  EXPECT_EQ(config.max_seq_len, 7);
  EXPECT_EQ(config.vocab_size, 300);
}

TEST(GPTConfig, RejectsChannelsNotDivisibleByHeads) {
  EXPECT_EQ(error_of([] { make_gpt_config(2, 3, 8, 5, 11); }),
            "model config: channels 8 is not divisible by num_heads 3");
}

TEST(GPTConfig, RejectsFieldsThatAreNotPositive) {
  EXPECT_EQ(error_of([] { make_gpt_config(0, 2, 8, 5, 11); }), "model config: num_layers 0 is not positive");
  EXPECT_EQ(error_of([] { make_gpt_config(2, -1, 8, 5, 11); }), "model config: num_heads -1 is not positive");
  EXPECT_EQ(error_of([] { make_gpt_config(2, 2, 0, 5, 11); }), "model config: channels 0 is not positive");
  EXPECT_EQ(error_of([] { make_gpt_config(2, 2, 8, 0, 11); }), "model config: max_seq_len 0 is not positive");
  EXPECT_EQ(error_of([] { make_gpt_config(2, 2, 8, 5, 0); }), "model config: vocab_size 0 is not positive");
}

TEST(GPTConfig, ValidationRejectsPaddedVocabularyBelowVocabulary) {
  EXPECT_EQ(error_of([] {
              validate_gpt_config({5, 200, 128, 2, 2, 8});
            }),
            "padded_vocab_size 128 is smaller than vocab_size 200");
}

// ---- Parameters ----

TEST(Parameters, Gpt2SmallSizesMatchLlmC) {
  const GPTConfig gpt2 = make_gpt_config(12, 12, 768, 1024, 50257);
  // llm.c: Vp*C, maxT*C, L*C, L*C, L*3C*C, L*3C, L*C*C, L*C, L*C, L*C, L*4C*C, L*4C, L*C*4C, L*C, C, C
  const std::array<size_t, kNumParameterTensors> expected = {38633472, 786432, 9216, 9216, 21233664, 27648,
                                                             7077888,  9216,   9216, 9216, 28311552, 36864,
                                                             28311552, 9216,   768,  768};
  EXPECT_EQ(parameter_tensor_sizes(gpt2), expected);
  EXPECT_EQ(num_parameters(gpt2), 124475904u);      // llm.c's "num_parameters: 124475904"
  EXPECT_EQ(parameters_per_layer(gpt2), 7087872u);  // 12 C^2 + 13 C
}

TEST(Parameters, TinySizesMatchAHandCount) {
  const std::array<size_t, kNumParameterTensors> expected = {1024, 40, 16,  16, 384, 48, 128, 16,
                                                             16,   16, 512, 64, 512, 16, 8,   8};
  EXPECT_EQ(parameter_tensor_sizes(kTiny), expected);
  EXPECT_EQ(num_parameters(kTiny), kTinyParameters);
}

TEST(Parameters, ViewsTileTheAllocationInOrder) {
  std::vector<float> memory(kTinyParameters);
  float* base = memory.data();
  const ParameterTensors<float> views = point_views(base, kTiny);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(kTiny);
  float* next = base;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    EXPECT_EQ(tensor_view(views, i), next) << parameter_tensor_name(i);
    next += sizes[i];
  }
  EXPECT_EQ(next, base + kTinyParameters);
  // The named members at offsets counted by hand.
  EXPECT_EQ(views.wte, base);
  EXPECT_EQ(views.wpe, base + 1024);
  EXPECT_EQ(views.ln1w, base + 1064);
  EXPECT_EQ(views.qkvw, base + 1096);
  EXPECT_EQ(views.fcprojw, base + 2280);
  EXPECT_EQ(views.lnfw, base + 2808);
  EXPECT_EQ(views.lnfb, base + 2816);
}

TEST(Parameters, LayerViewsAreTheLayersSlices) {
  std::vector<double> memory(kTinyParameters);
  const ParameterTensors<double> p = point_views(memory.data(), kTiny);
  const LayerParameters<double> layer0 = layer_views(p, kTiny, 0), layer1 = layer_views(p, kTiny, 1);
  EXPECT_EQ(layer0.ln1w, p.ln1w);
  EXPECT_EQ(layer0.fcprojb, p.fcprojb);
  // C = 8: per-layer sizes C, C, 3C*C, 3C, C*C, C, C, C, 4C*C, 4C, C*4C, C.
  EXPECT_EQ(layer1.ln1w, p.ln1w + 8);
  EXPECT_EQ(layer1.ln1b, p.ln1b + 8);
  EXPECT_EQ(layer1.qkvw, p.qkvw + 192);
  EXPECT_EQ(layer1.qkvb, p.qkvb + 24);
  EXPECT_EQ(layer1.attprojw, p.attprojw + 64);
  EXPECT_EQ(layer1.attprojb, p.attprojb + 8);
  EXPECT_EQ(layer1.ln2w, p.ln2w + 8);
  EXPECT_EQ(layer1.ln2b, p.ln2b + 8);
  EXPECT_EQ(layer1.fcw, p.fcw + 256);
  EXPECT_EQ(layer1.fcb, p.fcb + 32);
  EXPECT_EQ(layer1.fcprojw, p.fcprojw + 256);
  EXPECT_EQ(layer1.fcprojb, p.fcprojb + 8);
  EXPECT_EQ(parameters_per_layer(kTiny), 872u);  // 12 * 64 + 13 * 8
}

TEST(Parameters, WeightDecayOnMatricesAndEmbeddingsOnly) {
  const std::vector<std::string> decayed = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"};
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const std::string name = parameter_tensor_name(i);
    const bool is_decayed = std::find(decayed.begin(), decayed.end(), name) != decayed.end();
    EXPECT_EQ(parameter_tensor_has_weight_decay(i), is_decayed) << name;
  }
}

TEST(Parameters, NamesFollowLlmCsOrder) {
  const char* expected[] = {"wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
                            "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};
  for (int i = 0; i < kNumParameterTensors; ++i) EXPECT_STREQ(parameter_tensor_name(i), expected[i]);
  for (int i = 0; i < kNumParameterTensors; ++i)
    EXPECT_EQ(parameter_tensor_is_per_layer(i), i >= kLn1w && i <= kFcprojb) << expected[i];
}

namespace {

// Sample statistics of n draws from N(0, std^2). Tolerances are 5 or more standard
// errors of each estimate at the smallest n used (16384): the mean's std/sqrt(n), the
// std's std/sqrt(2n) (0.55%: allow 3%), the share within one std's sqrt(p(1-p)/n)
// (0.0036: allow 0.02 around 0.6827).
void expect_normal(const float* values, size_t n, double std, const char* name) {
  double sum = 0.0, sum_squares = 0.0;
  size_t within_one_std = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += values[i];
    sum_squares += double(values[i]) * values[i];
    within_one_std += std::fabs(values[i]) < std;
  }
  const double mean = sum / n, sample_std = std::sqrt(sum_squares / n - mean * mean);
  EXPECT_LT(std::fabs(mean), 5 * std / std::sqrt(double(n))) << name;
  EXPECT_NEAR(sample_std / std, 1.0, 0.03) << name;
  EXPECT_NEAR(double(within_one_std) / n, 0.6827, 0.02) << name;
}

void expect_all(const float* values, size_t n, float value, const char* name) {
  size_t others = 0;
  for (size_t i = 0; i < n; ++i) others += values[i] != value;
  EXPECT_EQ(others, 0u) << name << " should be all " << value;
}

}  // namespace

TEST(Parameters, InitHasGpt2Statistics) {
  const GPTConfig config = make_gpt_config(4, 4, 64, 256, 1000);  // Vp = 1024
  std::vector<float> host;
  init_gpt2_parameters(host, config, 42);
  ASSERT_EQ(host.size(), num_parameters(config));
  const ParameterTensors<float> p = point_views(host.data(), config);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  const size_t C = 64, V = 1000, Vp = 1024;
  const double residual_std = 0.02 / std::sqrt(2.0 * 4);

  expect_normal(p.wte, V * C, 0.02, "wte");
  expect_all(p.wte + V * C, (Vp - V) * C, 0.0f, "wte padded rows");
  expect_normal(p.wpe, sizes[kWpe], 0.02, "wpe");
  expect_normal(p.qkvw, sizes[kQkvw], 0.02, "qkvw");
  expect_normal(p.fcw, sizes[kFcw], 0.02, "fcw");
  expect_normal(p.attprojw, sizes[kAttprojw], residual_std, "attprojw");
  expect_normal(p.fcprojw, sizes[kFcprojw], residual_std, "fcprojw");
  for (int i : {kLn1w, kLn2w, kLnfw}) expect_all(tensor_view(p, i), sizes[i], 1.0f, parameter_tensor_name(i));
  for (int i : {kLn1b, kQkvb, kAttprojb, kLn2b, kFcb, kFcprojb, kLnfb})
    expect_all(tensor_view(p, i), sizes[i], 0.0f, parameter_tensor_name(i));
}

TEST(Parameters, InitIsDeterministicForASeedAndDiffersForAnother) {
  std::vector<float> first, again, other;
  init_gpt2_parameters(first, kTiny, 7);
  init_gpt2_parameters(again, kTiny, 7);
  init_gpt2_parameters(other, kTiny, 8);
  EXPECT_TRUE(bitwise_equal(first, again));
  size_t random_entries = 0, equal_entries = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i] == 0.0f || first[i] == 1.0f) continue;  // the constant biases and LayerNorm weights
    ++random_entries;
    equal_entries += first[i] == other[i];
  }
  EXPECT_EQ(random_entries, 1664u);  // wte's 11 real rows 88 + wpe 40 + qkvw 384 + attprojw 128 + fcw 512 + fcprojw 512
  EXPECT_EQ(equal_entries, 0u);
}

TEST(Parameters, InitOfALayerDoesNotDependOnTheOtherLayers) {
  const GPTConfig two_layers = make_gpt_config(2, 2, 8, 5, 11), three_layers = make_gpt_config(3, 2, 8, 5, 11);
  std::vector<float> a, b;
  init_gpt2_parameters(a, two_layers, 3);
  init_gpt2_parameters(b, three_layers, 3);
  const ParameterTensors<float> pa = point_views(a.data(), two_layers), pb = point_views(b.data(), three_layers);
  for (int l = 0; l < 2; ++l) {
    const LayerParameters<float> la = layer_views(pa, two_layers, l), lb = layer_views(pb, three_layers, l);
    EXPECT_EQ(std::memcmp(la.qkvw, lb.qkvw, 3 * 8 * 8 * sizeof(float)), 0) << "layer " << l;
    EXPECT_EQ(std::memcmp(la.fcw, lb.fcw, 4 * 8 * 8 * sizeof(float)), 0) << "layer " << l;
  }
  EXPECT_EQ(std::memcmp(pa.wte, pb.wte, 128 * 8 * sizeof(float)), 0);
}
