// Specification of the fused classifier (kernels/classifier.cuh): per-row cross-entropy
// losses and the logits' gradient against a plain log-softmax in double, the gradient
// against finite differences, padding that never matters, bad targets reported, and the mean
// loss summed in the host's order.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/classifier.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "trainer/data/documents.h"

namespace {

struct Shape {
  size_t BT;
  int V, Vp;
};

// Awkward shapes: fewer columns than a warp, not multiples of 32, more columns than threads.
const Shape kShapes[] = {{1, 5, 8}, {7, 37, 40}, {5, 1000, 1024}, {3, 1300, 1300}};

std::vector<int> random_targets(size_t BT, int V, uint64_t seed) {
  std::vector<double> u = random_values(BT, seed, 0.0, 1.0);
  std::vector<int> targets(BT);
  for (size_t i = 0; i < BT; ++i) targets[i] = std::min(V - 1, int(u[i] * V));
  return targets;
}

// Logits in [-4, 4); the padding columns hold large values that would dominate the
// softmax if they were read.
std::vector<double> random_logits(const Shape& s, uint64_t seed) {
  std::vector<double> logits = random_values(s.BT * s.Vp, seed, -4.0, 4.0);
  for (size_t row = 0; row < s.BT; ++row)
    for (int i = s.V; i < s.Vp; ++i) logits[row * s.Vp + i] = 100.0 + i;
  return logits;
}

// The plain statement: loss = log sum_j exp(x_j) - x_target over j < V,
// dlogits = dloss (softmax(x) - onehot(target)) for j < V, 0 in the padding.
void reference(const std::vector<double>& logits, const std::vector<int>& targets, double dloss, const Shape& s,
               std::vector<double>& losses, std::vector<double>& dlogits) {
  losses.assign(s.BT, 0.0);
  dlogits.assign(s.BT * s.Vp, 0.0);
  for (size_t row = 0; row < s.BT; ++row) {
    const double* x = &logits[row * s.Vp];
    double max = x[0];
    for (int j = 1; j < s.V; ++j) max = std::max(max, x[j]);
    double sum = 0.0;
    for (int j = 0; j < s.V; ++j) sum += std::exp(x[j] - max);
    const double log_sum = max + std::log(sum);
    losses[row] = log_sum - x[targets[row]];
    for (int j = 0; j < s.V; ++j)
      dlogits[row * s.Vp + j] = dloss * (std::exp(x[j] - log_sum) - (j == targets[row] ? 1.0 : 0.0));
  }
}

// Runs the kernel on logits of type T; returns losses and dlogits as double, and the bad row.
template <typename T>
int run_classifier(const std::vector<double>& logits, const std::vector<int>& targets, double dloss,
                   const Shape& s, std::vector<double>& losses, std::vector<double>& dlogits) {
  DeviceBuffer<T> d_logits(convert<T>(logits));
  DeviceBuffer<Compute<T>> d_losses(s.BT);
  DeviceBuffer<int> d_targets(targets), d_bad_row(1);
  reset_bad_target_row(d_bad_row.data(), nullptr);
  classifier_forward_backward<T>(d_logits.data(), d_losses.data(), d_targets.data(), Compute<T>(dloss),
                                 d_bad_row.data(), s.BT, s.V, s.Vp, nullptr);
  losses = to_double(d_losses.to_host());
  dlogits = to_double(d_logits.to_host());
  return read_bad_target_row(d_bad_row.data(), nullptr);
}

// Checks type T against the reference on T-representable inputs, within the given
// relative errors of the losses and of the gradient.
template <typename T>
void expect_matches_reference(double loss_tolerance, double grad_tolerance) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "BT " << s.BT << " V " << s.V << " Vp " << s.Vp);
    const std::vector<double> logits = to_double(convert<T>(random_logits(s, 1)));
    const std::vector<int> targets = random_targets(s.BT, s.V, 2);
    const double dloss = 1.0 / double(s.BT);
    std::vector<double> losses, dlogits, expected_losses, expected_dlogits;
    EXPECT_EQ(run_classifier<T>(logits, targets, dloss, s, losses, dlogits), -1);
    reference(logits, targets, dloss, s, expected_losses, expected_dlogits);
    EXPECT_LE(max_relative_error(losses, expected_losses), loss_tolerance);
    EXPECT_LE(max_relative_error(dlogits, expected_dlogits), grad_tolerance);
  }
}

TEST(Classifier, DoubleMatchesLogSoftmax) {
  // Same arithmetic up to summation order and exp/log rounding: ~1e-15 relative.
  expect_matches_reference<double>(1e-12, 1e-12);
}

TEST(Classifier, FloatMatchesLogSoftmax) {
  // fp32 exp, log and a sum of up to 1300 terms (online rescaling adds a few roundings):
  // a few ulp of 6e-8 each, far below 1e-5.
  expect_matches_reference<float>(1e-5, 1e-5);
}

TEST(Classifier, Bf16MatchesLogSoftmax) {
  // fp32 arithmetic on the bf16 logits (the reference reads the same values): the losses
  // are fp32, so 1e-5; the gradient is stored in bf16 (8 significant bits, rounding error
  // up to 2^-9 = 2e-3 relative), within 2e-2.
  expect_matches_reference<__nv_bfloat16>(1e-5, 2e-2);
}

TEST(Classifier, GradientMatchesFiniteDifferences) {
  const Shape s{3, 13, 16};
  std::vector<double> logits = random_logits(s, 3);
  const std::vector<int> targets = random_targets(s.BT, s.V, 4);
  const double dloss = 1.0 / double(s.BT);
  std::vector<double> losses, dlogits;
  run_classifier<double>(logits, targets, dloss, s, losses, dlogits);

  // scaled_loss(x) = dloss * sum over rows of the kernel's losses.
  auto scaled_loss = [&](const std::vector<double>& x) {
    std::vector<double> row_losses, unused;
    run_classifier<double>(x, targets, dloss, s, row_losses, unused);
    double sum = 0.0;
    for (double l : row_losses) sum += l;
    return dloss * sum;
  };
  const std::vector<double> numeric = numeric_gradient(scaled_loss, logits);
  EXPECT_LE(max_relative_error(dlogits, numeric), 1e-6);
}

TEST(Classifier, PaddingGetsExactlyZeroAndNeverMatters) {
  const Shape s{7, 37, 40};
  std::vector<double> logits = random_logits(s, 5);
  const std::vector<int> targets = random_targets(s.BT, s.V, 6);
  std::vector<double> losses, dlogits, losses_other_padding, unused;
  run_classifier<float>(logits, targets, 0.25, s, losses, dlogits);
  for (size_t row = 0; row < s.BT; ++row)
    for (int i = s.V; i < s.Vp; ++i) EXPECT_EQ(dlogits[row * s.Vp + i], 0.0) << "row " << row << " col " << i;

  for (size_t row = 0; row < s.BT; ++row)
    for (int i = s.V; i < s.Vp; ++i) logits[row * s.Vp + i] = -1e30;
  run_classifier<float>(logits, targets, 0.25, s, losses_other_padding, unused);
  EXPECT_EQ(losses, losses_other_padding);
}

TEST(Classifier, TargetOutsideVocabularyIsReportedAndSkipped) {
  const Shape s{7, 37, 40};
  const std::vector<double> logits = random_logits(s, 7);
  const std::vector<int> good_targets = random_targets(s.BT, s.V, 8);
  std::vector<double> good_losses, good_dlogits;
  run_classifier<double>(logits, good_targets, 1.0, s, good_losses, good_dlogits);

  for (int bad : {-2, s.V}) {
    SCOPED_TRACE(testing::Message() << "bad target " << bad);
    std::vector<int> targets = good_targets;
    targets[2] = bad;
    std::vector<double> losses, dlogits;
    EXPECT_EQ(run_classifier<double>(logits, targets, 1.0, s, losses, dlogits), 2);
    for (size_t row = 0; row < s.BT; ++row) {
      for (int i = 0; i < s.Vp; ++i) {
        const size_t at = row * s.Vp + i;
        EXPECT_EQ(dlogits[at], row == 2 ? 0.0 : good_dlogits[at]) << "row " << row << " col " << i;
      }
      EXPECT_EQ(losses[row], row == 2 ? 0.0 : good_losses[row]) << "row " << row;
    }
  }

  std::vector<int> targets = good_targets;
  targets[1] = -2;
  targets[5] = s.V;
  std::vector<double> losses, dlogits;
  EXPECT_EQ(run_classifier<double>(logits, targets, 1.0, s, losses, dlogits), 5) << "the largest bad row";
}

static_assert(kIgnoredTarget == kMaskedTarget, "the loss must skip the data layer's padding target");

// A padded position (target kIgnoredTarget) is skipped as a bad target is, loss 0 and a zero
// gradient row, but it is not reported: padding is expected data, not a fault. The other rows are
// bitwise those of a call without it.
TEST(Classifier, MaskedTargetIsSkippedWithoutReport) {
  const Shape s{7, 37, 40};
  const std::vector<double> logits = random_logits(s, 7);
  const std::vector<int> good_targets = random_targets(s.BT, s.V, 8);
  std::vector<double> good_losses, good_dlogits;
  run_classifier<double>(logits, good_targets, 0.5, s, good_losses, good_dlogits);
  std::vector<int> targets = good_targets;
  targets[3] = targets[6] = kIgnoredTarget;
  std::vector<double> losses, dlogits;
  EXPECT_EQ(run_classifier<double>(logits, targets, 0.5, s, losses, dlogits), -1) << "no bad row";
  for (size_t row = 0; row < s.BT; ++row) {
    const bool masked = row == 3 || row == 6;
    EXPECT_EQ(losses[row], masked ? 0.0 : good_losses[row]) << "row " << row;
    for (int i = 0; i < s.Vp; ++i)
      EXPECT_EQ(dlogits[row * s.Vp + i], masked ? 0.0 : good_dlogits[row * s.Vp + i]) << "row " << row << " col " << i;
  }
}

// add_mean_loss's sum is bitwise the host's loop over rows 0..BT-1, here over two full tiles of
// the kernel's 1024 losses and a partial third. Losses of magnitudes from 1e-6 to 1e6, of both
// signs, make the order of the additions show: the same sum in reverse order differs.
template <typename S>
void expect_mean_loss_is_the_hosts_sum(uint64_t seed) {
  const size_t BT = 2 * 1024 + 517;
  const std::vector<double> mantissas = random_values(BT, seed), exponents = random_values(BT, seed + 1, -6.0, 6.0);
  std::vector<double> values(BT);
  for (size_t row = 0; row < BT; ++row) values[row] = mantissas[row] * std::pow(10.0, exponents[row]);
  const std::vector<S> losses = convert<S>(values);
  double in_order = 0.0, reversed = 0.0;
  for (size_t row = 0; row < BT; ++row) in_order += double(losses[row]);
  for (size_t row = BT; row-- > 0;) reversed += double(losses[row]);
  ASSERT_NE(in_order, reversed) << "these losses should make the order of the additions show";

  DeviceBuffer<S> d_losses(losses);
  DeviceBuffer<double> d_sum(std::vector<double>{0.75});
  add_mean_loss(d_sum.data(), d_losses.data(), BT, double(BT), nullptr);
  EXPECT_EQ(d_sum.to_host()[0], 0.75 + in_order / double(BT)) << "added (+=) to what was there";
}

TEST(Classifier, MeanLossIsBitwiseTheHostsSumInRowOrderAcrossTiles) {
  expect_mean_loss_is_the_hosts_sum<float>(11);
  expect_mean_loss_is_the_hosts_sum<double>(12);
}

}  // namespace
