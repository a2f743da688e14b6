// Checks of the residual connection (kernels/residual.cuh): the forward against a
// double loop, the backward (the same gradient to both inputs) against finite
// differences of the forward, its += semantics, and float and bf16 against double.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <vector>

#include "kernels/residual.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

// One element; B T C for B = 1, T = 7, C = 12 and C = 13 (not multiples of the 256-thread
// blocks); and more than one block.
const size_t kSizes[] = {1, 7 * 12, 7 * 13, 3 * 256 + 5};

template <typename E>
std::vector<double> forward(const std::vector<double>& a, const std::vector<double>& b) {
  DeviceBuffer<E> d_a(convert<E>(a)), d_b(convert<E>(b)), d_out(a.size());
  residual_forward(d_out.data(), d_a.data(), d_b.data(), a.size(), nullptr);
  return to_double(d_out.to_host());
}
// dinp added onto the given starting values.
template <typename E>
void backward(const std::vector<double>& dout, std::vector<double>& dinp) {
  DeviceBuffer<E> d_dout(convert<E>(dout)), d_dinp(convert<E>(dinp));
  residual_backward(d_dinp.data(), d_dout.data(), dout.size(), nullptr);
  dinp = to_double(d_dinp.to_host());
}

TEST(Residual, ForwardMatchesDoubleLoop) {
  for (size_t n : kSizes) {
    const std::vector<double> a = random_values(n, 501), b = random_values(n, 502);
    std::vector<double> expected(n);
    for (size_t i = 0; i < n; ++i) expected[i] = a[i] + b[i];
    EXPECT_EQ(forward<double>(a, b), expected) << "n " << n;  // the same one addition: exact
  }
}

TEST(Residual, BackwardGivesBothInputsTheFiniteDifferenceGradient) {
  for (size_t n : kSizes) {
    std::vector<double> a = random_values(n, 511), b = random_values(n, 512);
    const std::vector<double> projection = random_values(n, 513);
    std::vector<double> dinp(n);
    backward<double>(projection, dinp);
    const auto loss_of_a = [&](const std::vector<double>& x) { return project(forward<double>(x, b), projection); };
    const auto loss_of_b = [&](const std::vector<double>& x) { return project(forward<double>(a, x), projection); };
    EXPECT_LE(max_relative_error(dinp, numeric_gradient(loss_of_a, a)), 1e-6) << "n " << n;
    EXPECT_LE(max_relative_error(dinp, numeric_gradient(loss_of_b, b)), 1e-6) << "n " << n;
  }
}

TEST(Residual, BackwardAccumulatesOntoTheGradient) {
  const size_t n = 3 * 256 + 5;
  const std::vector<double> dout = random_values(n, 521), start = random_values(n, 522);
  std::vector<double> dinp = start;
  backward<double>(dout, dinp);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(dinp[i], start[i] + dout[i]) << i;  // one addition: exact
}

// Each reduced-precision instantiation against double on the same (rounded) inputs.
template <typename E>
void expect_close_to_double(double tolerance) {
  for (size_t n : kSizes) {
    const std::vector<double> a = to_double(convert<E>(random_values(n, 531)));
    const std::vector<double> b = to_double(convert<E>(random_values(n, 532)));
    EXPECT_LE(max_error_relative_to_scale(forward<E>(a, b), forward<double>(a, b)), tolerance) << "n " << n;
    std::vector<double> dinp = a, dinp_exact = a;
    backward<E>(b, dinp);
    backward<double>(b, dinp_exact);
    EXPECT_LE(max_error_relative_to_scale(dinp, dinp_exact), tolerance) << "n " << n;
  }
}

// fp32 (2^-24): one rounded addition, at most 6e-8 of the scale.
TEST(Residual, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9): one rounding of the fp32 sum to bf16, at most 2e-3 of the scale.
TEST(Residual, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

}  // namespace
