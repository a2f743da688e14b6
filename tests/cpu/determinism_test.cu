// The parameter gradients that sum over positions (embedding, LayerNorm weight and bias), and
// the fused attention's forward and backward, are bitwise reproducible: the same bits whatever
// order the CPU build runs threads and blocks in (shuffled with different seeds) and on one or
// two OS threads. CPU build only: it steers the scheduler through cpu::settings().
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cpu/runtime/settings.h"
#include "kernels/embedding.cuh"
#include "kernels/fused_attention.cuh"
#include "kernels/layernorm.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"

namespace {

// The bit patterns of values, so that comparisons are bitwise.
std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

// Runs compute under a shuffled thread order with the given seed on block_threads OS
// threads, then restores the settings.
std::vector<uint32_t> shuffled(uint64_t seed, int block_threads, const std::function<std::vector<float>()>& compute) {
  const cpu::Settings saved = cpu::settings();
  cpu::settings().thread_order = cpu::ThreadOrder::shuffle;
  cpu::settings().seed = seed;
  cpu::settings().block_threads = block_threads;
  const std::vector<float> result = compute();
  cpu::settings() = saved;
  return bits(result);
}

// 4 x 64 = 256 positions over 3 tokens (about 85 repeats each, so every run is a long fp32
// sum whose value depends on its order), C = 37, gradients accumulated onto nonzero values.
std::vector<float> embedding_gradients() {
  const int B = 4, T = 64, C = 37, Vp = 3;
  std::mt19937_64 rng(601);
  std::uniform_int_distribution<int> token(0, Vp - 1);
  std::vector<int> tokens(size_t(B) * T);
  for (int& t : tokens) t = token(rng);
  DeviceBuffer<int> d_tokens(tokens), workspace(embedding_backward_workspace_size(B, T, C));
  DeviceBuffer<float> dout(convert<float>(random_values(size_t(B) * T * C, 602)));
  DeviceBuffer<float> dwte(convert<float>(random_values(size_t(Vp) * C, 603)));
  DeviceBuffer<float> dwpe(convert<float>(random_values(size_t(T) * C, 604)));
  embedding_backward(dwte.data(), dwpe.data(), workspace.data(), dout.data(), d_tokens.data(), B, T, C, nullptr);
  std::vector<float> result = dwte.to_host(), position_part = dwpe.to_host();
  result.insert(result.end(), position_part.begin(), position_part.end());
  return result;
}

// 300 rows (three 128-row groups, the last partial) of C = 37 channels.
std::vector<float> layernorm_weight_gradients() {
  const size_t N = 300;
  const int C = 37;
  DeviceBuffer<float> inp(convert<float>(random_values(N * C, 611))), dout(convert<float>(random_values(N * C, 612)));
  DeviceBuffer<float> weight(convert<float>(random_values(C, 613))), bias(convert<float>(random_values(C, 614)));
  DeviceBuffer<float> out(N * C), mean(N), rstd(N), workspace(layernorm_backward_weight_workspace_size(N, C));
  DeviceBuffer<float> dweight(convert<float>(random_values(C, 615))), dbias(convert<float>(random_values(C, 616)));
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, nullptr);
  layernorm_backward_weight(dweight.data(), dbias.data(), workspace.data(), dout.data(), inp.data(), mean.data(),
                            rstd.data(), N, C, nullptr);
  std::vector<float> result = dweight.to_host(), bias_part = dbias.to_host();
  result.insert(result.end(), bias_part.begin(), bias_part.end());
  return result;
}

// B 2, T 67 (no multiple of a tile), NH 2, heads of 64, fp32: the output, the log-sum-exp and
// the input gradient, whose sums over key and query tiles have no atomics.
std::vector<float> fused_attention_results() {
  const int B = 2, T = 67, C = 128, NH = 2;
  const size_t bt = size_t(B) * T;
  DeviceBuffer<float> inp(convert<float>(random_values(bt * 3 * C, 621, -2, 2)));
  DeviceBuffer<float> dout(convert<float>(random_values(bt * C, 622))), out(bt * C), dinp(bt * 3 * C);
  DeviceBuffer<float> lse(fused_attention_saved_size(B, T, NH));
  DeviceBuffer<float> scratch(fused_attention_backward_scratch_size(B, T, NH));
  fused_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, NH, nullptr);
  fused_attention_backward(dinp.data(), scratch.data(), dout.data(), inp.data(), out.data(), lse.data(), B, T, C, NH,
                           nullptr);
  std::vector<float> result = out.to_host(), lse_part = lse.to_host(), dinp_part = dinp.to_host();
  result.insert(result.end(), lse_part.begin(), lse_part.end());
  result.insert(result.end(), dinp_part.begin(), dinp_part.end());
  return result;
}

TEST(Embedding, BackwardIsBitwiseReproducibleUnderShuffledThreadOrder) {
  const std::vector<uint32_t> first = shuffled(1, 1, embedding_gradients);
  EXPECT_EQ(shuffled(2, 1, embedding_gradients), first);
  EXPECT_EQ(shuffled(3, 2, embedding_gradients), first);
}

TEST(LayerNorm, BackwardWeightIsBitwiseReproducibleUnderShuffledThreadOrder) {
  const std::vector<uint32_t> first = shuffled(1, 1, layernorm_weight_gradients);
  EXPECT_EQ(shuffled(2, 1, layernorm_weight_gradients), first);
  EXPECT_EQ(shuffled(3, 2, layernorm_weight_gradients), first);
}

TEST(FusedAttention, IsBitwiseReproducibleUnderShuffledThreadOrder) {
  const std::vector<uint32_t> first = shuffled(1, 1, fused_attention_results);
  EXPECT_EQ(shuffled(2, 1, fused_attention_results), first);
  EXPECT_EQ(shuffled(3, 2, fused_attention_results), first);
}

}  // namespace
