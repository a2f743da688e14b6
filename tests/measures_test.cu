// Checks of the tests' own error measures (tests/gradient_check.h, tests/scaled_error.h):
// what they return for agreeing and disagreeing tensors, and that a value that is not
// finite, in either tensor, makes them infinite, so that an element a kernel never wrote
// (NaN in the CPU build) or a NaN forward under finite differences fails the check.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

using Measure = std::function<double(const std::vector<double>&, const std::vector<double>&)>;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
const std::vector<double> kReference = {1.0, -2.0, 4.0, 0.5};

// Every position of either tensor, with each value that is not finite.
void expect_not_finite_is_infinite(const Measure& measure) {
  for (double bad : {kNaN, kInf, -kInf}) {
    for (size_t i = 0; i < kReference.size(); ++i) {
      std::vector<double> spoiled = kReference;
      spoiled[i] = bad;
      EXPECT_EQ(measure(spoiled, kReference), kInf) << bad << " at " << i << " of the first tensor";
      EXPECT_EQ(measure(kReference, spoiled), kInf) << bad << " at " << i << " of the reference";
    }
  }
}

TEST(MaxRelativeError, IsEachEntrysErrorRelativeToItself) {
  EXPECT_EQ(max_relative_error(kReference, kReference), 0.0);
  // 4 -> 4.4 is 10% of the entry, 0.5 -> 0.52 is 4%.
  EXPECT_NEAR(max_relative_error({1.0, -2.0, 4.4, 0.52}, kReference), 0.1, 1e-12);
  // An entry near zero is judged against 1e-3 of the largest magnitude (4): 1e-3 off it is 0.25.
  EXPECT_NEAR(max_relative_error({4.0, 1e-3}, {4.0, 0.0}), 0.25, 1e-12);
}

TEST(MaxRelativeError, IsInfiniteForANonFiniteValue) { expect_not_finite_is_infinite(max_relative_error); }

TEST(MaxRelativeError, IsInfiniteForDifferentSizes) {
  EXPECT_EQ(max_relative_error({1.0, 2.0}, {1.0, 2.0, 3.0}), kInf);
  EXPECT_EQ(max_relative_error({1.0, 2.0, 3.0}, {1.0, 2.0}), kInf);
}

TEST(MaxRelativeError, FailsAFiniteDifferenceCheckOfANaNForward) {
  // A forward that leaves one output unwritten (NaN) makes the loss, and so every central
  // difference, NaN: the check must fail whatever the analytic gradient says.
  std::vector<double> x = {0.3, -0.7, 1.1};
  const auto loss_with_one_nan_output = [](const std::vector<double>& v) {
    return project({v[0] * v[0], v[1] * v[2], kNaN}, {1.0, 1.0, 1.0});
  };
  const std::vector<double> numeric = numeric_gradient(loss_with_one_nan_output, x);
  const std::vector<double> analytic = {2 * x[0], x[2], x[1]};  // of the finite part
  EXPECT_EQ(max_relative_error(analytic, numeric), kInf);
}

TEST(MaxErrorRelativeToScale, IsTheLargestErrorOverTheLargestReferenceMagnitude) {
  EXPECT_EQ(max_error_relative_to_scale(kReference, kReference), 0.0);
  // The largest error (0.1, at 0.5) over the largest magnitude (4).
  EXPECT_NEAR(max_error_relative_to_scale({1.05, -2.0, 4.0, 0.6}, kReference), 0.025, 1e-12);
}

TEST(MaxErrorRelativeToScale, IsInfiniteForANonFiniteValue) {
  expect_not_finite_is_infinite(max_error_relative_to_scale);
}

TEST(MaxErrorRelativeToScale, IsInfiniteForDifferentSizes) {
  EXPECT_EQ(max_error_relative_to_scale({1.0, 2.0}, {1.0, 2.0, 3.0}), kInf);
}

}  // namespace
