// Specification of the global gradient norm and clipping (kernels/global_norm.cuh): the
// per-tensor sums of squares and their total against a plain sum in double over tensors
// of odd sizes, bit-for-bit repeatable; the clipping factor and the scaling kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/global_norm.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"

namespace {

// Odd sizes: a single element, less than a warp, less than a block, a few blocks (whose
// unused workspace entries must read as zero: the CPU build's cudaMalloc fills them with
// NaN), and more than kGlobalNormBlocks blocks of 16 elements per thread, so threads loop.
const size_t kSizes[] = {1, 31, 1000, 12345, 70001, 600001};
constexpr int kTensors = 6;

struct Norms {
  std::vector<double> tensor_sums;
  double total;
};

// The tensors' values, representable in T.
template <typename T>
std::vector<std::vector<double>> random_tensors() {
  std::vector<std::vector<double>> tensors;
  for (int i = 0; i < kTensors; ++i) tensors.push_back(to_double(convert<T>(random_values(kSizes[i], 10 + i))));
  return tensors;
}

template <typename T>
Norms run_global_norm(const std::vector<std::vector<double>>& tensors) {
  std::vector<std::unique_ptr<DeviceBuffer<T>>> buffers;
  std::vector<const T*> pointers;
  for (const std::vector<double>& t : tensors) {
    buffers.push_back(std::make_unique<DeviceBuffer<T>>(convert<T>(t)));
    pointers.push_back(buffers.back()->data());
  }
  DeviceBuffer<Compute<T>> tensor_sums(kTensors), total(1), workspace(global_norm_workspace_size(kTensors));
  global_norm_squared<T>(tensor_sums.data(), total.data(), workspace.data(), pointers.data(), kSizes, kTensors,
                         nullptr);
  return {to_double(tensor_sums.to_host()), to_double(total.to_host())[0]};
}

Norms plain_sums(const std::vector<std::vector<double>>& tensors) {
  Norms norms{{}, 0.0};
  for (const std::vector<double>& t : tensors) {
    double sum = 0.0;
    for (double x : t) sum += x * x;
    norms.tensor_sums.push_back(sum);
    norms.total += sum;
  }
  return norms;
}

template <typename T>
void expect_matches_plain_sum(double tolerance) {
  const std::vector<std::vector<double>> tensors = random_tensors<T>();
  const Norms norms = run_global_norm<T>(tensors), expected = plain_sums(tensors);
  for (int i = 0; i < kTensors; ++i)
    EXPECT_NEAR(norms.tensor_sums[i], expected.tensor_sums[i], tolerance * expected.tensor_sums[i]) << "tensor " << i;
  EXPECT_NEAR(norms.total, expected.total, tolerance * expected.total);
}

TEST(GlobalNorm, DoubleMatchesPlainSum) {
  // Positive terms, a different order of additions: ~1e-16 per addition.
  expect_matches_plain_sum<double>(1e-13);
}

TEST(GlobalNorm, FloatMatchesPlainSum) {
  // Positive terms (no cancellation) summed in fp32 along paths of at most ~25 additions
  // (a few per thread, 5 in the warp, 16 warps, 64 blocks, 5 tensors), each rounding
  // at 2^-24 = 6e-8 relative: below 2e-6, within the fp32 tolerance 1e-5.
  expect_matches_plain_sum<float>(1e-5);
}

TEST(GlobalNorm, Bf16MatchesPlainSum) {
  // The reference squares the same bf16 values; the sums are fp32, as for float.
  expect_matches_plain_sum<__nv_bfloat16>(1e-5);
}

TEST(GlobalNorm, BitwiseIdenticalOverTwoRuns) {
  const std::vector<std::vector<double>> tensors = random_tensors<float>();
  const Norms first = run_global_norm<float>(tensors), second = run_global_norm<float>(tensors);
  EXPECT_EQ(first.tensor_sums, second.tensor_sums);
  EXPECT_EQ(first.total, second.total);
}

TEST(GlobalNorm, RowSumsAddEveryValueOfTheirRow) {
  // Small integers: every order of addition gives the exact sum.
  const size_t rows = 3, count = 301;
  std::vector<float> values(rows * count);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 7);
  DeviceBuffer<float> d_values(values), d_out(rows);
  sum_rows_in_fixed_order(d_out.data(), static_cast<const float*>(d_values.data()), rows, count, nullptr);
  const std::vector<float> out = d_out.to_host();
  for (size_t r = 0; r < rows; ++r) {
    float expected = 0.0f;
    for (size_t i = 0; i < count; ++i) expected += values[r * count + i];
    EXPECT_EQ(out[r], expected) << "row " << r;
  }
}

TEST(GlobalNorm, ClipFactorBringsTheNormToAtMostTheMaximum) {
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_factor(0.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_factor(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_LE(4.0 * clip_factor(4.0, 1.0), 1.0);
}

TEST(GlobalNorm, ScaleTensorMultipliesEveryElement) {
  const size_t n = 1037;  // not a multiple of the block size
  const double factor = 0.3;
  const std::vector<double> x = random_values(n, 20);
  DeviceBuffer<double> d_double(x);
  DeviceBuffer<__nv_bfloat16> d_bf16(convert<__nv_bfloat16>(x));
  scale_tensor(d_double.data(), n, factor, nullptr);
  scale_tensor(d_bf16.data(), n, factor, nullptr);
  const std::vector<double> scaled = d_double.to_host();
  const std::vector<__nv_bfloat16> scaled_bf16 = d_bf16.to_host(), x_bf16 = convert<__nv_bfloat16>(x);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(scaled[i], x[i] * factor) << i;
    // bf16 storage, fp32 product, rounded to nearest.
    EXPECT_EQ(float(scaled_bf16[i]), float(__float2bfloat16(float(x_bf16[i]) * float(factor)))) << i;
  }
}

}  // namespace

namespace {

// The tensors laid out one after another in one array (as a stage's gradients are), their slots
// in reverse order with a gap, summed by the table's two launches.
template <typename T>
std::vector<double> run_table(const std::vector<std::vector<double>>& tensors) {
  std::vector<double> all;
  std::vector<size_t> offsets, counts, slots;
  for (int i = 0; i < kTensors; ++i) {
    offsets.push_back(all.size());
    counts.push_back(tensors[i].size());
    slots.push_back(size_t(2 * (kTensors - 1 - i)));
    all.insert(all.end(), tensors[i].begin(), tensors[i].end());
  }
  unsigned blocks = 0;
  const std::vector<NormTensor> host_table = norm_tensor_table(offsets, counts, slots, blocks);
  DeviceBuffer<T> base(convert<T>(all));
  DeviceBuffer<NormTensor> table(host_table);
  DeviceBuffer<Compute<T>> out(std::vector<Compute<T>>(2 * kTensors, Compute<T>(-1))),
      workspace(global_norm_workspace_size(kTensors));
  global_norm_squared_of_table<T>(out.data(), workspace.data(), base.data(), table.data(), kTensors, blocks, nullptr);
  return to_double(out.to_host());
}

// What lets the trainer sum a stage's regions in two launches: each tensor's sum is bitwise the
// one global_norm_squared computes for it, written to its slot, the other entries untouched.
template <typename T>
void expect_table_matches_per_tensor_launches() {
  const std::vector<std::vector<double>> tensors = random_tensors<T>();
  const Norms norms = run_global_norm<T>(tensors);
  const std::vector<double> out = run_table<T>(tensors);
  for (int i = 0; i < kTensors; ++i) {
    EXPECT_EQ(out[2 * (kTensors - 1 - i)], norms.tensor_sums[i]) << "tensor " << i;
    EXPECT_EQ(out[2 * (kTensors - 1 - i) + 1], -1.0) << "the slot after tensor " << i;
  }
}

}  // namespace

TEST(GlobalNorm, TableInTwoLaunchesIsBitwiseThePerTensorSums) {
  expect_table_matches_per_tensor_launches<float>();
  expect_table_matches_per_tensor_launches<__nv_bfloat16>();
  expect_table_matches_per_tensor_launches<double>();
}

// A tensor not counted (a replicated tensor's copy on a tp rank other than 0) writes 0 to its slot
// when finite, NaN when it holds a NaN or an infinity; counted ones their sums.
TEST(GlobalNorm, TensorNotCountedGivesZeroOrNaN) {
  // Four tensors of 3: counted and finite, then not counted: finite, with a NaN, with an infinity.
  const std::vector<float> all = {1.0f, -2.0f, 3.0f, 1.0f, -2.0f, 3.0f, 1.0f, NAN, 3.0f, INFINITY, 0.0f, 1.0f};
  unsigned blocks = 0;
  const std::vector<NormTensor> host_table =
      norm_tensor_table({0, 3, 6, 9}, {3, 3, 3, 3}, {0, 1, 2, 3}, blocks, {1, 0, 0, 0});
  DeviceBuffer<float> base(all), out(std::vector<float>(4, -1.0f)), workspace(global_norm_workspace_size(4));
  DeviceBuffer<NormTensor> table(host_table);
  global_norm_squared_of_table<float>(out.data(), workspace.data(), base.data(), table.data(), 4, blocks, nullptr);
  const std::vector<float> slots = out.to_host();
  EXPECT_EQ(slots[0], 14.0f);
  EXPECT_EQ(slots[1], 0.0f);
  EXPECT_TRUE(std::isnan(slots[2]));
  EXPECT_TRUE(std::isnan(slots[3]));
}
