// Checks of the token and position embedding (kernels/embedding.cuh): the forward
// against a double loop, the backward against finite differences of the forward, its
// += semantics, repeated tokens, float and bf16 against double, and the backward's
// order of summation bit for bit (in every thread order make test runs), with long runs
// of one token, up to 65,536 positions.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/element.cuh"
#include "kernels/embedding.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

struct Shape {
  int B, T, C, Vp, maxT;
};
// T = 1; T = 7 with T < maxT (unused position rows); C = 12 and 13 (not multiples of 4
// or 32) and C over the 128 channels of a block of the sums; T not a multiple of the
// forward's 8 rows per block; B T = 300 positions span two 256-key tiles of the sort,
// with 7 tokens so that every token repeats many times. (Runs longer than a segment:
// the tests of the summation order below.)
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
  DeviceBuffer<int> d_tokens(tokens), workspace(embedding_backward_workspace_size(s.B, s.T, s.C));
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
// over a token's run (at most about 70 of the 300 positions, one segment) or over B,
// rounded once: errors grow like sqrt(terms) 2^-24, a few 1e-7 of the scale.
TEST(Embedding, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9 relative rounding): the sums run in fp32 and are rounded once to bf16,
// ~2e-3 of the scale, with margin for the fp32 sums.
TEST(Embedding, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

// ---- the backward's order of summation ----

// n positions holding the given number of positions of tokens 0, 1, ..., the rest spread
// uniformly over tokens [counts.size(), Vp), in a seeded random order.
std::vector<int> tokens_with_runs(size_t n, const std::vector<int>& counts, int Vp, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> tokens;
  for (size_t v = 0; v < counts.size(); ++v) tokens.insert(tokens.end(), counts[v], int(v));
  std::uniform_int_distribution<int> rest(int(counts.size()), Vp - 1);
  while (tokens.size() < n) tokens.push_back(rest(rng));
  std::shuffle(tokens.begin(), tokens.end(), rng);
  return tokens;
}

// The positions of each token, in position order.
std::vector<std::vector<size_t>> runs_of(const std::vector<int>& tokens, int Vp) {
  std::vector<std::vector<size_t>> runs(Vp);
  for (size_t p = 0; p < tokens.size(); ++p) runs[tokens[p]].push_back(p);
  return runs;
}

// dwte and dwpe after embedding_backward, computed on the host in the order that
// kernels/embedding.cuh documents, in the element type's arithmetic (fp32 for bf16).
template <typename E>
void backward_in_documented_order(const Shape& s, const std::vector<int>& tokens, const std::vector<E>& dout,
                                  std::vector<E>& dwte, std::vector<E>& dwpe) {
  using Real = Compute<E>;
  const auto runs = runs_of(tokens, s.Vp);
  for (int v = 0; v < s.Vp; ++v) {
    if (runs[v].empty()) continue;
    for (int c = 0; c < s.C; ++c) {
      const auto x = [&](size_t k) { return to_compute(dout[runs[v][k] * s.C + c]); };
      Real total = 0;
      for (size_t start = 0; start < runs[v].size(); start += kEmbeddingSegment) {
        Real segment = 0;
        for (size_t k = start; k < std::min(runs[v].size(), start + kEmbeddingSegment); ++k) segment += x(k);
        total = start == 0 ? segment : total + segment;
      }
      E& gradient = dwte[size_t(v) * s.C + c];
      gradient = from_compute<E>(to_compute(gradient) + total);
    }
  }
  for (size_t i = 0; i < size_t(s.T) * s.C; ++i) {
    Real sum = 0;
    for (int b = 0; b < s.B; ++b) sum += to_compute(dout[size_t(b) * s.T * s.C + i]);
    dwpe[i] = from_compute<E>(to_compute(dwpe[i]) + sum);
  }
}

template <typename E>
std::vector<uint64_t> bits(const std::vector<E>& values) {
  std::vector<uint64_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(&out[i], &values[i], sizeof(E));
  return out;
}

// Runs the backward on E-valued inputs onto nonzero starting gradients; expects the bits
// of the documented order. Every thread order that make test runs must give them.
template <typename E>
void expect_documented_order(const Shape& s, const std::vector<int>& tokens) {
  const std::vector<E> dout = convert<E>(random_values(output_size(s), 301));
  std::vector<E> dwte = convert<E>(random_values(size_t(s.Vp) * s.C, 302));
  std::vector<E> dwpe = convert<E>(random_values(size_t(s.maxT) * s.C, 303));
  DeviceBuffer<int> d_tokens(tokens), workspace(embedding_backward_workspace_size(s.B, s.T, s.C));
  DeviceBuffer<E> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  embedding_backward(d_dwte.data(), d_dwpe.data(), workspace.data(), d_dout.data(), d_tokens.data(), s.B, s.T, s.C,
                     nullptr);
  backward_in_documented_order(s, tokens, dout, dwte, dwpe);
  EXPECT_EQ(bits(d_dwte.to_host()), bits(dwte)) << describe(s);
  EXPECT_EQ(bits(d_dwpe.to_host()), bits(dwpe)) << describe(s);
}

// 2,048 positions: runs of 700 (three segments, the last short), 512 (two whole ones), 257
// (a segment and one position), 256 (one segment exactly) and 255, the rest short; C over
// one block of 128 channels.
const Shape kRunsShape{4, 512, 130, 12, 600};
const std::vector<int> kRunLengths = {700, 512, 257, 256, 255};

TEST(Embedding, BackwardSumsInTheDocumentedOrderInDouble) {
  expect_documented_order<double>(kRunsShape, tokens_with_runs(2048, kRunLengths, kRunsShape.Vp, 311));
}
TEST(Embedding, BackwardSumsInTheDocumentedOrderInFloat) {
  expect_documented_order<float>(kRunsShape, tokens_with_runs(2048, kRunLengths, kRunsShape.Vp, 312));
}
TEST(Embedding, BackwardSumsInTheDocumentedOrderInBf16) {
  expect_documented_order<__nv_bfloat16>(kRunsShape, tokens_with_runs(2048, kRunLengths, kRunsShape.Vp, 313));
}

// The fp32 token gradient against its exact (double) value, element by element. Each term
// of a run of r positions passes through at most m roundings: r with r <= L = kEmbeddingSegment
// (r - 1 additions, then the one onto dwte), else (L - 1) + (ceil(r / L) - 1) + 1. So the
// error is at most gamma_m (|dwte| + sum |dout|), gamma_m = m u / (1 - m u), u = 2^-24
// (Higham, Accuracy and Stability of Numerical Algorithms, 4.2): rigorous, not statistical.
void expect_float_within_its_bound(const Shape& s, const std::vector<int>& tokens) {
  const std::vector<double> dout = to_double(convert<float>(random_values(output_size(s), 321)));
  const std::vector<double> start = to_double(convert<float>(random_values(size_t(s.Vp) * s.C, 322)));
  std::vector<double> dwte = start, dwpe(size_t(s.maxT) * s.C);
  backward<float>(s, tokens, dout, dwte, dwpe);
  const auto runs = runs_of(tokens, s.Vp);
  const double u = 0x1p-24;
  for (int v = 0; v < s.Vp; ++v) {
    const size_t r = runs[v].size(), L = kEmbeddingSegment;
    const double m = double(r <= L ? r : L + (r + L - 1) / L - 1), gamma = m * u / (1 - m * u);
    for (int c = 0; c < s.C; ++c) {
      const size_t i = size_t(v) * s.C + c;
      double exact = start[i], magnitude = std::abs(start[i]);
      for (size_t p : runs[v]) exact += dout[p * s.C + c], magnitude += std::abs(dout[p * s.C + c]);
      ASSERT_LE(std::abs(dwte[i] - exact), gamma * magnitude) << "token " << v << " (" << r << " positions), channel " << c;
    }
  }
}

TEST(Embedding, FloatTokenGradientIsWithinTheErrorBoundOfItsOrder) {
  expect_float_within_its_bound(kRunsShape, tokens_with_runs(2048, kRunLengths, kRunsShape.Vp, 331));
}

// B T = 65,536 positions of a byte vocabulary, the commonest token on 20% of them (13,107:
// 52 segments): the documented order bit for bit and the error bound. C = 16 keeps the test
// to the sort and the runs: 0.15-0.3 s in each thread order on the CPU build (2026-11-24).
TEST(Embedding, BackwardOf65536PositionsWithOneTokenOnAFifth) {
  const Shape s{64, 1024, 16, 256, 1024};
  const std::vector<int> tokens = tokens_with_runs(65536, {13107}, s.Vp, 341);
  expect_documented_order<float>(s, tokens);
  expect_float_within_its_bound(s, tokens);
}

}  // namespace
