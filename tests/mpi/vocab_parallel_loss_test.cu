// The vocabulary-parallel cross-entropy (model/vocab_parallel.h) on 1, 2 and 4 tensor-parallel
// ranks: its gradient against finite differences in double, its losses and gradient against the
// fused classifier of one process (today's tp = 1 path, kernels/classifier.cuh), the same loss
// on every tp rank, padding and bad targets as the classifier treats them. Runs under mpirun
// -np 4 as dp 4 x tp 1, dp 2 x tp 2 and tp 4: every replica checks its own tp group.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "comm/tensor_parallel.h"
#include "kernels/classifier.cuh"
#include "model/vocab_parallel.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/mpi/tensor_parallel_groups.h"

namespace {

const cudaStream_t kStream = nullptr;
constexpr int kTensorParallelSizes[] = {1, 2, 4};

struct Shape {
  size_t BT;
  int V, Vp;
};

// Vp divides by 4. At tp 4: {5, 37, 40}'s last slice [30, 40) is part padding; {3, 29, 40}'s is
// all padding (its maximum is -inf until the reduction); {4, 1000, 1024} has 64 threads a row.
const Shape kShapes[] = {{5, 37, 40}, {3, 29, 40}, {4, 1000, 1024}};

// Logits in [-4, 4), the same on every rank; the padding columns hold large values that would
// dominate the softmax if they were read.
std::vector<double> random_logits(const Shape& s, uint64_t seed) {
  std::vector<double> logits = random_values(s.BT * s.Vp, seed, -4.0, 4.0);
  for (size_t row = 0; row < s.BT; ++row)
    for (int i = s.V; i < s.Vp; ++i) logits[row * s.Vp + i] = 100.0 + i;
  return logits;
}

std::vector<int> random_targets(size_t BT, int V, uint64_t seed) {
  std::vector<double> u = random_values(BT, seed, 0.0, 1.0);
  std::vector<int> targets(BT);
  for (size_t i = 0; i < BT; ++i) targets[i] = std::min(V - 1, int(u[i] * V));
  return targets;
}

// The columns [slice.first, slice.first + slice.columns) of rows of width Vp.
std::vector<double> columns_of(const std::vector<double>& rows, int Vp, VocabularySlice slice) {
  std::vector<double> out;
  for (size_t row = 0; row < rows.size() / Vp; ++row)
    for (int i = 0; i < slice.columns; ++i) out.push_back(rows[row * Vp + slice.first + i]);
  return out;
}

struct Result {
  std::vector<double> losses, dlogits;  // dlogits: this rank's slice
  int bad_target_row;
};

// vocab_parallel_cross_entropy on this rank's slice of the whole logits (a collective over tp).
template <typename T>
Result run_vocab_parallel(const CommGroups& groups, const std::vector<double>& logits, const std::vector<int>& targets,
                          double dloss, const Shape& s) {
  const VocabularySlice slice = vocabulary_slice(groups.mesh, s.Vp);
  DeviceBuffer<T> d_logits(convert<T>(columns_of(logits, s.Vp, slice)));
  DeviceBuffer<Compute<T>> losses(s.BT), row_stats(3 * s.BT);
  DeviceBuffer<int> d_targets(targets), bad_row(1);
  reset_bad_target_row(bad_row.data(), kStream);
  vocab_parallel_cross_entropy<T>(groups, d_logits.data(), losses.data(), row_stats.data(), d_targets.data(),
                                  Compute<T>(dloss), bad_row.data(), s.BT, s.V, s.Vp, kStream);
  return {to_double(losses.to_host()), to_double(d_logits.to_host()), read_bad_target_row(bad_row.data(), kStream)};
}

// Today's fused classifier on the whole logits, in one process.
template <typename T>
Result run_classifier(const std::vector<double>& logits, const std::vector<int>& targets, double dloss,
                      const Shape& s) {
  DeviceBuffer<T> d_logits(convert<T>(logits));
  DeviceBuffer<Compute<T>> losses(s.BT);
  DeviceBuffer<int> d_targets(targets), bad_row(1);
  reset_bad_target_row(bad_row.data(), kStream);
  classifier_forward_backward<T>(d_logits.data(), losses.data(), d_targets.data(), Compute<T>(dloss), bad_row.data(),
                                 s.BT, s.V, s.Vp, kStream);
  return {to_double(losses.to_host()), to_double(d_logits.to_host()), read_bad_target_row(bad_row.data(), kStream)};
}

TEST(VocabParallelLoss, GradientMatchesFiniteDifferencesOnOneTwoAndFourRanks) {
  const Shape s{3, 13, 16};  // at tp 4: slices of 4 columns, the last [12, 16) one word and padding
  std::vector<double> logits = random_logits(s, 3);
  const std::vector<int> targets = random_targets(s.BT, s.V, 4);
  const double dloss = 1.0 / double(s.BT);
  for (int tp : kTensorParallelSizes) {
    SCOPED_TRACE(testing::Message() << "tp " << tp);
    TensorParallelGroups g(tp);
    const Result analytic = run_vocab_parallel<double>(g.groups, logits, targets, dloss, s);
    // scaled_loss(x) = dloss * the sum of the rows' losses, every rank of the tp group perturbing
    // the same element of the whole logits in turn (each evaluation is a collective).
    auto scaled_loss = [&](const std::vector<double>& x) {
      double sum = 0.0;
      for (double l : run_vocab_parallel<double>(g.groups, x, targets, dloss, s).losses) sum += l;
      return dloss * sum;
    };
    const std::vector<double> numeric = numeric_gradient(scaled_loss, logits);
    const VocabularySlice slice = vocabulary_slice(g.groups.mesh, s.Vp);
    // Central differences in double: truncation and rounding both below 1e-9 (tests/gradient_check.h).
    EXPECT_LE(max_relative_error(analytic.dlogits, columns_of(numeric, s.Vp, slice)), 1e-6);
  }
}

// Each tp against the classifier of one process, in type T, within the given relative errors.
template <typename T>
void expect_matches_the_classifier(double tolerance) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "BT " << s.BT << " V " << s.V << " Vp " << s.Vp);
    const std::vector<double> logits = to_double(convert<T>(random_logits(s, 1)));
    const std::vector<int> targets = random_targets(s.BT, s.V, 2);
    const double dloss = 1.0 / double(s.BT);
    const Result one_process = run_classifier<T>(logits, targets, dloss, s);
    for (int tp : kTensorParallelSizes) {
      SCOPED_TRACE(testing::Message() << "tp " << tp);
      TensorParallelGroups g(tp);
      const Result sliced = run_vocab_parallel<T>(g.groups, logits, targets, dloss, s);
      EXPECT_EQ(sliced.bad_target_row, -1);
      EXPECT_LE(max_relative_error(sliced.losses, one_process.losses), tolerance);
      const VocabularySlice slice = vocabulary_slice(g.groups.mesh, s.Vp);
      EXPECT_LE(max_relative_error(sliced.dlogits, columns_of(one_process.dlogits, s.Vp, slice)), tolerance);
    }
  }
}

TEST(VocabParallelLoss, DoubleMatchesTheClassifierOfOneProcess) {
  // The same exp and log of the same values; only the order of the sum of exponentials differs
  // (per slice, then over the ranks; the classifier rescales as it goes): up to ~V ulp of
  // 1.1e-16 for V = 1000, 1e-13, below 1e-12.
  expect_matches_the_classifier<double>(1e-12);
}

TEST(VocabParallelLoss, FloatMatchesTheClassifierOfOneProcess) {
  // Each is within 1e-5 of the exact value (Classifier.FloatMatchesLogSoftmax: a few ulp of 6e-8
  // for fp32 exp, log and a sum of up to 1300 terms), so within 2e-5 of each other.
  expect_matches_the_classifier<float>(2e-5);
}

// After the three reductions every tp rank computes the loss from the same three numbers: equal
// bitwise. Every rank's loss equal to the group's maximum means all are equal.
TEST(VocabParallelLoss, EveryTpRankHasBitwiseTheSameLosses) {
  const Shape s{5, 37, 40};
  const std::vector<double> logits = random_logits(s, 5);
  const std::vector<int> targets = random_targets(s.BT, s.V, 6);
  for (int tp : {2, 4}) {
    TensorParallelGroups g(tp);
    const std::vector<double> losses = run_vocab_parallel<float>(g.groups, logits, targets, 1.0, s).losses;
    DeviceBuffer<float> largest(convert<float>(losses));
    allreduce_tensor_parallel(g.groups, largest.data(), s.BT, ncclFloat32, ncclMax, kStream);
    EXPECT_EQ(to_double(largest.to_host()), losses) << "tp " << tp;
  }
}

TEST(VocabParallelLoss, PaddingGetsExactlyZeroAndNeverMatters) {
  const Shape s{5, 37, 40};
  std::vector<double> logits = random_logits(s, 7);
  const std::vector<int> targets = random_targets(s.BT, s.V, 8);
  TensorParallelGroups g(4);
  const VocabularySlice slice = vocabulary_slice(g.groups.mesh, s.Vp);
  const Result large_padding = run_vocab_parallel<float>(g.groups, logits, targets, 0.25, s);
  for (size_t row = 0; row < s.BT; ++row)
    for (int i = std::max(0, s.V - slice.first); i < slice.columns; ++i)
      EXPECT_EQ(large_padding.dlogits[row * slice.columns + i], 0.0) << row << " " << i;
  for (size_t row = 0; row < s.BT; ++row)
    for (int i = s.V; i < s.Vp; ++i) logits[row * s.Vp + i] = -1e30;
  EXPECT_EQ(run_vocab_parallel<float>(g.groups, logits, targets, 0.25, s).losses, large_padding.losses);
}

TEST(VocabParallelLoss, TargetOutsideTheVocabularyIsReportedAndSkippedOnEveryRank) {
  const Shape s{5, 37, 40};
  const std::vector<double> logits = random_logits(s, 9);
  std::vector<int> targets = random_targets(s.BT, s.V, 10);
  targets[1] = s.V;  // a padding column of the last slice
  targets[3] = -2;
  targets[4] = kIgnoredTarget;  // padding: skipped as well, but not reported
  TensorParallelGroups g(4);
  const Result result = run_vocab_parallel<double>(g.groups, logits, targets, 1.0, s);
  EXPECT_EQ(result.bad_target_row, 3);
  const VocabularySlice slice = vocabulary_slice(g.groups.mesh, s.Vp);
  for (size_t row : {size_t(1), size_t(3), size_t(4)}) {
    EXPECT_EQ(result.losses[row], 0.0) << "row " << row;
    for (int i = 0; i < slice.columns; ++i) EXPECT_EQ(result.dlogits[row * slice.columns + i], 0.0) << row << " " << i;
  }
}

}  // namespace
