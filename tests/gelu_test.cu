// Checks of GELU (kernels/gelu.cuh): the forward against GPT-2's formula in double,
// the backward against finite differences of the forward, its = semantics in place,
// and float and bf16 against double.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/gelu.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

// One element; B T 4C for B = 1, T = 7, C = 12 and C = 13 (not multiples of the 256-thread
// blocks); and more than one block.
const size_t kSizes[] = {1, 7 * 4 * 12, 7 * 4 * 13, 3 * 256 + 5};

// Inputs over [-5, 5]: the tails where gelu tends to 0 and to x, and the curved middle.
std::vector<double> random_inputs(size_t n, uint64_t seed) { return random_values(n, seed, -5.0, 5.0); }

template <typename E>
std::vector<double> forward(const std::vector<double>& inp) {
  DeviceBuffer<E> d_inp(convert<E>(inp)), d_out(inp.size());
  gelu_forward(d_out.data(), d_inp.data(), inp.size(), nullptr);
  return to_double(d_out.to_host());
}
template <typename E>
std::vector<double> backward(const std::vector<double>& inp, const std::vector<double>& dout) {
  DeviceBuffer<E> d_inp(convert<E>(inp)), d_dout(convert<E>(dout)), d_dinp(inp.size());
  gelu_backward(d_dinp.data(), d_inp.data(), d_dout.data(), inp.size(), nullptr);
  return to_double(d_dinp.to_host());
}

TEST(Gelu, ForwardMatchesGpt2FormulaInDouble) {
  for (size_t n : kSizes) {
    const std::vector<double> inp = random_inputs(n, 401);
    std::vector<double> expected(n);
    for (size_t i = 0; i < n; ++i) {
      const double x = inp[i];
      expected[i] = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    // The same double operations up to the order of a few products: ~1e-16.
    EXPECT_LE(max_relative_error(forward<double>(inp), expected), 1e-12) << "n " << n;
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  for (size_t n : kSizes) {
    std::vector<double> inp = random_inputs(n, 411);
    const std::vector<double> projection = random_values(n, 412);
    const auto loss = [&](const std::vector<double>& x) { return project(forward<double>(x), projection); };
    EXPECT_LE(max_relative_error(backward<double>(inp, projection), numeric_gradient(loss, inp)), 1e-6) << "n " << n;
  }
}

TEST(Gelu, BackwardOverwritesInPlace) {
  const size_t n = 7 * 4 * 13;
  const std::vector<double> inp = random_inputs(n, 421), dout = random_values(n, 422);
  DeviceBuffer<double> d_inp(inp), d_gradient(dout);
  gelu_backward(d_gradient.data(), d_inp.data(), d_gradient.data(), n, nullptr);
  EXPECT_EQ(d_gradient.to_host(), backward<double>(inp, dout));
}

// Each reduced-precision instantiation against double on the same (rounded) inputs.
template <typename E>
void expect_close_to_double(double tolerance) {
  for (size_t n : kSizes) {
    const std::vector<double> inp = to_double(convert<E>(random_inputs(n, 431)));
    const std::vector<double> dout = to_double(convert<E>(random_values(n, 432)));
    EXPECT_LE(max_error_relative_to_scale(forward<E>(inp), forward<double>(inp)), tolerance) << "n " << n;
    EXPECT_LE(max_error_relative_to_scale(backward<E>(inp, dout), backward<double>(inp, dout)), tolerance) << "n " << n;
  }
}

// fp32 (2^-24 per rounding): a handful of products, tanhf (within 2 ulp) and one rounding
// of the result: a few 1e-7 of the scale.
TEST(Gelu, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9 relative rounding): fp32 arithmetic, then one rounding to bf16: ~2e-3 of the
// scale, with margin.
TEST(Gelu, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

}  // namespace
