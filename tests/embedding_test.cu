// Checks of the token and position embedding (kernels/embedding.cuh): the forward
// against a double loop, the backward against finite differences of the forward, its
// += semantics, repeated tokens, and float and bf16 against double.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/embedding.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

struct Shape {
  int B, T, C, Vp, maxT;
};
// T = 1; T = 7 with T < maxT (unused position rows); C = 12 and 13 (not multiples of 4
// or 32) and C over the 128 channel threads of a token's run; B T C not a multiple of the
// 256-thread elementwise kernels; B T = 300 positions span two 256-position tiles of the
// ordering kernel, with 7 tokens so that every token repeats many times.
const Shape kShapes[] = {{1, 1, 12, 5, 4}, {2, 7, 13, 11, 9}, {3, 7, 12, 4, 7}, {1, 5, 130, 3, 5},
                         {2, 150, 3, 7, 150}};

std::string describe(const Shape& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C) + ", Vp " +
         std::to_string(s.Vp) + ", maxT " + std::to_string(s.maxT);
}
size_t output_size(const Shape& s) { return size_t(s.B) * s.T * s.C; }

std::vector<int> random_tokens(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> token(0, s.Vp - 1);
  std::vector<int> tokens(size_t(s.B) * s.T);
  for (int& t : tokens) t = token(rng);
  return tokens;
}

template <typename E>
std::vector<double> forward(const Shape& s, const std::vector<int>& tokens, const std::vector<double>& wte,
                            const std::vector<double>& wpe) {
  DeviceBuffer<int> d_tokens(tokens);
  DeviceBuffer<E> d_wte(convert<E>(wte)), d_wpe(convert<E>(wpe)), d_out(output_size(s));
  embedding_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B, s.T, s.C, nullptr);
  return to_double(d_out.to_host());
}

// dwte (Vp, C) and dwpe (maxT, C) added onto the given starting values.
template <typename E>
void backward(const Shape& s, const std::vector<int>& tokens, const std::vector<double>& dout,
              std::vector<double>& dwte, std::vector<double>& dwpe) {
  DeviceBuffer<int> d_tokens(tokens), workspace(embedding_backward_workspace_size(s.B, s.T));
  DeviceBuffer<E> d_dout(convert<E>(dout)), d_dwte(convert<E>(dwte)), d_dwpe(convert<E>(dwpe));
  embedding_backward(d_dwte.data(), d_dwpe.data(), workspace.data(), d_dout.data(), d_tokens.data(), s.B, s.T, s.C,
                     nullptr);
  dwte = to_double(d_dwte.to_host());
  dwpe = to_double(d_dwpe.to_host());
}

TEST(Embedding, ForwardMatchesDoubleLoop) {
  for (const Shape& s : kShapes) {
    const std::vector<int> tokens = random_tokens(s, 201);
    const std::vector<double> wte = random_values(size_t(s.Vp) * s.C, 202);
    const std::vector<double> wpe = random_values(size_t(s.maxT) * s.C, 203);
    std::vector<double> expected(output_size(s));
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t)
        for (int c = 0; c < s.C; ++c)
          expected[(size_t(b) * s.T + t) * s.C + c] =
              wte[size_t(tokens[b * s.T + t]) * s.C + c] + wpe[size_t(t) * s.C + c];
    // One addition of the same two doubles on both sides: equal exactly.
    EXPECT_EQ(forward<double>(s, tokens, wte, wpe), expected) << describe(s);
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kShapes) {
    const std::vector<int> tokens = random_tokens(s, 211);
    std::vector<double> wte = random_values(size_t(s.Vp) * s.C, 212);
    std::vector<double> wpe = random_values(size_t(s.maxT) * s.C, 213);
    const std::vector<double> projection = random_values(output_size(s), 214);
    std::vector<double> dwte(wte.size()), dwpe(wpe.size());
    backward<double>(s, tokens, projection, dwte, dwpe);
    const auto loss_of_wte = [&](const std::vector<double>& x) {
      return project(forward<double>(s, tokens, x, wpe), projection);
    };
    const auto loss_of_wpe = [&](const std::vector<double>& x) {
      return project(forward<double>(s, tokens, wte, x), projection);
    };
    EXPECT_LE(max_relative_error(dwte, numeric_gradient(loss_of_wte, wte)), 1e-6) << describe(s);
    EXPECT_LE(max_relative_error(dwpe, numeric_gradient(loss_of_wpe, wpe)), 1e-6) << describe(s);
  }
}

TEST(Embedding, BackwardAccumulatesOntoTheGradients) {
  const Shape s{2, 7, 13, 11, 9};
  const std::vector<int> tokens = random_tokens(s, 221);
  const std::vector<double> dout = random_values(output_size(s), 222);
  const std::vector<double> start_wte = random_values(size_t(s.Vp) * s.C, 223);
  const std::vector<double> start_wpe = random_values(size_t(s.maxT) * s.C, 224);
  std::vector<double> from_zero_wte(start_wte.size()), from_zero_wpe(start_wpe.size());
  backward<double>(s, tokens, dout, from_zero_wte, from_zero_wpe);
  std::vector<double> dwte = start_wte, dwpe = start_wpe;
  backward<double>(s, tokens, dout, dwte, dwpe);
  // The kernel adds its finished sum to the start value once, as start + (0 + sum) here: exact.
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_EQ(dwte[i], start_wte[i] + from_zero_wte[i]) << "dwte " << i;
  for (size_t i = 0; i < dwpe.size(); ++i) EXPECT_EQ(dwpe[i], start_wpe[i] + from_zero_wpe[i]) << "dwpe " << i;
}

TEST(Embedding, OneRepeatedTokenGetsEveryPositionsGradient) {
  const Shape s{3, 7, 12, 4, 7};
  const std::vector<int> tokens(size_t(s.B) * s.T, 2);
  // Small integers: every sum is exact, so the expected gradient is a plain loop.
  std::vector<double> dout(output_size(s));
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = double(int(i % 11) - 5);
  std::vector<double> dwte(size_t(s.Vp) * s.C), dwpe(size_t(s.maxT) * s.C);
  backward<double>(s, tokens, dout, dwte, dwpe);
  for (int v = 0; v < s.Vp; ++v)
    for (int c = 0; c < s.C; ++c) {
      double expected = 0.0;
      if (v == 2)
        for (size_t position = 0; position < tokens.size(); ++position) expected += dout[position * s.C + c];
      EXPECT_EQ(dwte[size_t(v) * s.C + c], expected) << "token " << v << ", channel " << c;
    }
}

// Each reduced-precision instantiation against double on the same (rounded) inputs.
template <typename E>
void expect_close_to_double(double tolerance) {
  for (const Shape& s : kShapes) {
    const std::vector<int> tokens = random_tokens(s, 231);
    const std::vector<double> wte = to_double(convert<E>(random_values(size_t(s.Vp) * s.C, 232)));
    const std::vector<double> wpe = to_double(convert<E>(random_values(size_t(s.maxT) * s.C, 233)));
    const std::vector<double> dout = to_double(convert<E>(random_values(output_size(s), 234)));
    EXPECT_LE(max_error_relative_to_scale(forward<E>(s, tokens, wte, wpe), forward<double>(s, tokens, wte, wpe)),
              tolerance)
        << describe(s);
    std::vector<double> dwte(wte.size()), dwpe(wpe.size()), dwte_double(wte.size()), dwpe_double(wpe.size());
    backward<E>(s, tokens, dout, dwte, dwpe);
    backward<double>(s, tokens, dout, dwte_double, dwpe_double);
    EXPECT_LE(max_error_relative_to_scale(dwte, dwte_double), tolerance) << describe(s);
    EXPECT_LE(max_error_relative_to_scale(dwpe, dwpe_double), tolerance) << describe(s);
  }
}

// fp32 (2^-24 per rounding): one rounded add in the forward; in the backward fp32 sums
// over a token's run (at most about 70 of the 300 positions) or over B, rounded once:
// errors grow like sqrt(terms) 2^-24, a few 1e-7 of the scale.
TEST(Embedding, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9 relative rounding): the sums run in fp32 and are rounded once to bf16,
// ~2e-3 of the scale, with margin for the fp32 sums.
TEST(Embedding, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

}  // namespace
