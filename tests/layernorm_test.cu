// Checks of LayerNorm (kernels/layernorm.cuh): the forward and its saved statistics
// against a double loop, the fused residual forward against the unfused pair, both
// backward functions against finite differences of the forward, their += semantics,
// float and bf16 against double, and the bf16 weight gradients over 1024 rows against the
// bound of their fp32 accumulation.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/layernorm.cuh"
#include "tests/bf16_sum_bound.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

struct Shape {
  int B, T, C;
  size_t rows() const { return size_t(B) * T; }
  size_t size() const { return rows() * C; }
};
// T = 1; T = 7; C = 12 and 13 (not multiples of 4 or 32); C = 45 over one warp's 32
// lanes; B T not a multiple of the 8 rows per block; B T = 300 rows in three groups of
// the weight gradient's 128 rows (the last one partial), C = 37 in two 32-column tiles.
const Shape kShapes[] = {{1, 1, 12}, {2, 7, 13}, {3, 7, 12}, {1, 5, 45}, {2, 150, 37}};
// The shapes small enough for finite differences over every input.
const Shape kSmallShapes[] = {{1, 1, 12}, {2, 7, 13}, {3, 7, 12}, {1, 5, 45}};

std::string describe(const Shape& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C);
}

// The layer's inputs and the weight of the projection that makes the loss.
struct Problem {
  Shape shape;
  std::vector<double> inp, weight, bias, dout;  // (N, C), (C), (C), (N, C)
};
Problem random_problem(const Shape& s, uint64_t seed) {
  // Weights around 1 as initialised in GPT-2, so that no channel is switched off.
  return {s, random_values(s.size(), seed), random_values(s.C, seed + 1, 0.5, 1.5), random_values(s.C, seed + 2),
          random_values(s.size(), seed + 3)};
}

struct Forward {
  std::vector<double> out, mean, rstd;
};
template <typename E>
Forward forward(const Shape& s, const std::vector<double>& inp, const std::vector<double>& weight,
                   const std::vector<double>& bias) {
  DeviceBuffer<E> d_inp(convert<E>(inp)), d_weight(convert<E>(weight)), d_bias(convert<E>(bias)), d_out(s.size());
  DeviceBuffer<Compute<E>> d_mean(s.rows()), d_rstd(s.rows());
  layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_weight.data(), d_bias.data(),
                    s.rows(), s.C, nullptr);
  return {to_double(d_out.to_host()), to_double(d_mean.to_host()), to_double(d_rstd.to_host())};
}

// dinp (N, C) added onto the given starting values, after a forward on the same inputs.
template <typename E>
void backward_input(const Problem& p, std::vector<double>& dinp) {
  const Shape& s = p.shape;
  DeviceBuffer<E> d_inp(convert<E>(p.inp)), d_weight(convert<E>(p.weight)), d_bias(convert<E>(p.bias));
  DeviceBuffer<E> d_out(s.size()), d_dout(convert<E>(p.dout)), d_dinp(convert<E>(dinp));
  DeviceBuffer<Compute<E>> d_mean(s.rows()), d_rstd(s.rows());
  layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_weight.data(), d_bias.data(),
                    s.rows(), s.C, nullptr);
  layernorm_backward_input(d_dinp.data(), d_dout.data(), d_inp.data(), d_weight.data(), d_mean.data(), d_rstd.data(),
                           s.rows(), s.C, nullptr);
  dinp = to_double(d_dinp.to_host());
}

// dweight (C) and dbias (C) added onto the given starting values, after a forward.
template <typename E>
void backward_weight(const Problem& p, std::vector<double>& dweight, std::vector<double>& dbias) {
  const Shape& s = p.shape;
  DeviceBuffer<E> d_inp(convert<E>(p.inp)), d_weight(convert<E>(p.weight)), d_bias(convert<E>(p.bias));
  DeviceBuffer<E> d_out(s.size()), d_dout(convert<E>(p.dout)), d_dweight(convert<E>(dweight)),
      d_dbias(convert<E>(dbias));
  DeviceBuffer<Compute<E>> d_mean(s.rows()), d_rstd(s.rows());
  DeviceBuffer<Compute<E>> workspace(layernorm_backward_weight_workspace_size(s.rows(), s.C));
  layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_weight.data(), d_bias.data(),
                    s.rows(), s.C, nullptr);
  layernorm_backward_weight(d_dweight.data(), d_dbias.data(), workspace.data(), d_dout.data(), d_inp.data(),
                            d_mean.data(), d_rstd.data(), s.rows(), s.C, nullptr);
  dweight = to_double(d_dweight.to_host());
  dbias = to_double(d_dbias.to_host());
}

TEST(LayerNorm, ForwardAndSavedStatisticsMatchDoubleLoop) {
  for (const Shape& s : kShapes) {
    const Problem p = random_problem(s, 301);
    std::vector<double> out(s.size()), mean(s.rows()), rstd(s.rows());
    for (size_t row = 0; row < s.rows(); ++row) {
      const double* x = &p.inp[row * s.C];
      double sum = 0.0, squares = 0.0;
      for (int c = 0; c < s.C; ++c) sum += x[c];
      mean[row] = sum / s.C;
      for (int c = 0; c < s.C; ++c) squares += (x[c] - mean[row]) * (x[c] - mean[row]);
      rstd[row] = 1.0 / std::sqrt(squares / s.C + 1e-5);
      for (int c = 0; c < s.C; ++c) out[row * s.C + c] = (x[c] - mean[row]) * rstd[row] * p.weight[c] + p.bias[c];
    }
    const Forward result = forward<double>(s, p.inp, p.weight, p.bias);
    // Double sums of at most 45 terms of magnitude <= 1, in a different order: ~1e-15.
    EXPECT_LE(max_relative_error(result.out, out), 1e-12) << describe(s);
    EXPECT_LE(max_relative_error(result.mean, mean), 1e-12) << describe(s);
    EXPECT_LE(max_relative_error(result.rstd, rstd), 1e-12) << describe(s);
  }
}

// The fused kernel stores a + b rounded to the element type and normalises what it stored,
// so it equals the residual add followed by layernorm_forward bit for bit, in every type.
template <typename E>
void expect_fused_equals_unfused() {
  for (const Shape& s : kShapes) {
    const Problem p = random_problem(s, 311);
    const std::vector<double> other = random_values(s.size(), 312);
    DeviceBuffer<E> d_a(convert<E>(p.inp)), d_b(convert<E>(other)), d_weight(convert<E>(p.weight)),
        d_bias(convert<E>(p.bias)), d_residual(s.size()), d_out(s.size());
    DeviceBuffer<Compute<E>> d_mean(s.rows()), d_rstd(s.rows());
    residual_layernorm_forward(d_residual.data(), d_out.data(), d_mean.data(), d_rstd.data(), d_a.data(), d_b.data(),
                               d_weight.data(), d_bias.data(), s.rows(), s.C, nullptr);
    const std::vector<double> residual = to_double(d_residual.to_host());
    const std::vector<double> a = to_double(d_a.to_host()), b = to_double(d_b.to_host());
    std::vector<double> sum(s.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = a[i] + b[i];
    // The fp32 add is correctly rounded, and so is the double sum rounded to float (double
    // carries over twice fp32's precision): the same value, then rounded alike to bf16.
    EXPECT_EQ(residual, to_double(convert<E>(sum))) << describe(s);
    const Forward unfused = forward<E>(s, residual, p.weight, p.bias);
    EXPECT_EQ(to_double(d_out.to_host()), unfused.out) << describe(s);
    EXPECT_EQ(to_double(d_mean.to_host()), unfused.mean) << describe(s);
    EXPECT_EQ(to_double(d_rstd.to_host()), unfused.rstd) << describe(s);
  }
}
TEST(LayerNorm, FusedResidualForwardEqualsAddThenLayerNormDouble) { expect_fused_equals_unfused<double>(); }
TEST(LayerNorm, FusedResidualForwardEqualsAddThenLayerNormFloat) { expect_fused_equals_unfused<float>(); }
TEST(LayerNorm, FusedResidualForwardEqualsAddThenLayerNormBf16) { expect_fused_equals_unfused<__nv_bfloat16>(); }

TEST(LayerNorm, BackwardInputMatchesFiniteDifferences) {
  for (const Shape& s : kSmallShapes) {
    Problem p = random_problem(s, 321);
    std::vector<double> dinp(s.size());
    backward_input<double>(p, dinp);
    const auto loss = [&](const std::vector<double>& x) {
      return project(forward<double>(s, x, p.weight, p.bias).out, p.dout);
    };
    EXPECT_LE(max_relative_error(dinp, numeric_gradient(loss, p.inp)), 1e-6) << describe(s);
  }
}

TEST(LayerNorm, BackwardWeightMatchesFiniteDifferences) {
  for (const Shape& s : kShapes) {
    Problem p = random_problem(s, 331);
    std::vector<double> dweight(s.C), dbias(s.C);
    backward_weight<double>(p, dweight, dbias);
    const auto loss_of_weight = [&](const std::vector<double>& w) {
      return project(forward<double>(s, p.inp, w, p.bias).out, p.dout);
    };
    const auto loss_of_bias = [&](const std::vector<double>& b) {
      return project(forward<double>(s, p.inp, p.weight, b).out, p.dout);
    };
    EXPECT_LE(max_relative_error(dweight, numeric_gradient(loss_of_weight, p.weight)), 1e-6) << describe(s);
    EXPECT_LE(max_relative_error(dbias, numeric_gradient(loss_of_bias, p.bias)), 1e-6) << describe(s);
  }
}

// Both backward functions add their result to the start value once. The weight gradients add
// a finished sum (start + (0 + sum) here: exact). The input gradient adds rstd times a
// difference, which nvcc contracts into one fused multiply-add: round(start + rstd d) on a GPU
// against the host's round(start + round(rstd d)), three roundings of at most 2^-53 of
// |start| + |result| apart in double, so within 2^-51 of it (exact in the CPU build, which does
// not fuse); an overwrite instead of an add would be off by |start|.
TEST(LayerNorm, BackwardFunctionsAccumulateOntoTheGradients) {
  const Shape s{2, 150, 37};
  const Problem p = random_problem(s, 341);
  const std::vector<double> start_inp = random_values(s.size(), 342), start_weight = random_values(s.C, 343),
                            start_bias = random_values(s.C, 344);
  std::vector<double> dinp_from_zero(s.size()), dweight_from_zero(s.C), dbias_from_zero(s.C);
  backward_input<double>(p, dinp_from_zero);
  backward_weight<double>(p, dweight_from_zero, dbias_from_zero);
  std::vector<double> dinp = start_inp, dweight = start_weight, dbias = start_bias;
  backward_input<double>(p, dinp);
  backward_weight<double>(p, dweight, dbias);
  for (size_t i = 0; i < dinp.size(); ++i)
    EXPECT_NEAR(dinp[i], start_inp[i] + dinp_from_zero[i],
                std::ldexp(std::fabs(start_inp[i]) + std::fabs(dinp_from_zero[i]), -51))
        << "dinp " << i;
  for (int c = 0; c < s.C; ++c) {
    EXPECT_EQ(dweight[c], start_weight[c] + dweight_from_zero[c]) << "dweight " << c;
    EXPECT_EQ(dbias[c], start_bias[c] + dbias_from_zero[c]) << "dbias " << c;
  }
}

// The bf16 weight and bias gradients at a realistic row count (B T = 8 x 128 = 1024 rows in 8
// groups of 128; C = 64, two tiles), onto bf16 starting values, within the bound of
// tests/bf16_sum_bound.h. The statistics are given (fp32 values of the double ones, computed
// here: a forward launch took most of the test's 2.3 s under racecheck), so the reference uses
// the very mean and rstd the kernel reads. A term passes through at most
// 128 / 8 = 16 sums in its row lane, 8 over the lanes, 8 over the groups and 1 onto the
// gradient (K = 33); a weight term dout (x - mean) rstd carries R = 3 roundings of its own, a
// bias term none. E <= 0.0011 here, about 1/30 of half a bf16 ulp at the mean |sum| (15 to 16).
// Measured (CPU build, 2026-11-26), the worst error in units of the bound: dweight 0.98 and
// dbias 0.99 (the correctly rounded sums); with the row-lane partials kept in bf16 (16 roundings
// each), 117 and 69.
TEST(LayerNorm, Bf16WeightGradientsOverRealisticRowsAreTheRoundedSums) {
  using E = __nv_bfloat16;
  const Shape s{8, 128, 64};
  Problem p = random_problem(s, 361);
  for (std::vector<double>* v : {&p.inp, &p.dout}) *v = to_double(convert<E>(*v));
  std::vector<double> mean(s.rows()), rstd(s.rows());  // each row's, rounded to fp32 as the kernel holds them
  for (size_t row = 0; row < s.rows(); ++row) {
    double sum = 0.0, squares = 0.0;
    for (int c = 0; c < s.C; ++c) sum += p.inp[row * s.C + c];
    for (int c = 0; c < s.C; ++c) squares += std::pow(p.inp[row * s.C + c] - sum / s.C, 2);
    mean[row] = float(sum / s.C);
    rstd[row] = float(1.0 / std::sqrt(squares / s.C + 1e-5));
  }
  const std::vector<double> dweight0 = to_double(convert<E>(random_values(s.C, 362))),
                            dbias0 = to_double(convert<E>(random_values(s.C, 363)));
  DeviceBuffer<E> d_inp(convert<E>(p.inp)), d_dout(convert<E>(p.dout)), d_dweight(convert<E>(dweight0)),
      d_dbias(convert<E>(dbias0));
  DeviceBuffer<float> d_mean(convert<float>(mean)), d_rstd(convert<float>(rstd));
  DeviceBuffer<float> workspace(layernorm_backward_weight_workspace_size(s.rows(), s.C));
  layernorm_backward_weight(d_dweight.data(), d_dbias.data(), workspace.data(), d_dout.data(), d_inp.data(),
                            d_mean.data(), d_rstd.data(), s.rows(), s.C, nullptr);
  std::vector<double> exact_dweight(s.C), exact_dbias(s.C), dweight_error(s.C), dbias_error(s.C);
  for (int c = 0; c < s.C; ++c) {
    long double weight_sum = dweight0[c], weight_magnitude = std::fabs(dweight0[c]);
    long double bias_sum = dbias0[c], bias_magnitude = std::fabs(dbias0[c]);
    for (size_t row = 0; row < s.rows(); ++row) {
      const long double dy = p.dout[row * s.C + c], term = dy * (p.inp[row * s.C + c] - mean[row]) * rstd[row];
      weight_sum += term;
      weight_magnitude += std::fabs(term);
      bias_sum += dy;
      bias_magnitude += std::fabs(dy);
    }
    exact_dweight[c] = double(weight_sum);
    exact_dbias[c] = double(bias_sum);
    dweight_error[c] = fp32_sum_error_bound(16 + 8 + 8 + 1, 3, double(weight_magnitude));
    dbias_error[c] = fp32_sum_error_bound(16 + 8 + 8 + 1, 0, double(bias_magnitude));
  }
  EXPECT_LE(worst_error_in_bf16_sum_bounds(to_double(d_dweight.to_host()), exact_dweight, dweight_error), 1.0);
  EXPECT_LE(worst_error_in_bf16_sum_bounds(to_double(d_dbias.to_host()), exact_dbias, dbias_error), 1.0);
}

// Each reduced-precision instantiation against double on the same (rounded) inputs.
template <typename E>
void expect_close_to_double(double tolerance) {
  for (const Shape& s : kShapes) {
    Problem p = random_problem(s, 351);
    for (std::vector<double>* v : {&p.inp, &p.weight, &p.bias, &p.dout}) *v = to_double(convert<E>(*v));
    const Forward low = forward<E>(s, p.inp, p.weight, p.bias);
    const Forward exact = forward<double>(s, p.inp, p.weight, p.bias);
    EXPECT_LE(max_error_relative_to_scale(low.out, exact.out), tolerance) << describe(s);
    EXPECT_LE(max_error_relative_to_scale(low.rstd, exact.rstd), tolerance) << describe(s);
    std::vector<double> dinp(s.size()), dinp_exact(s.size());
    backward_input<E>(p, dinp);
    backward_input<double>(p, dinp_exact);
    EXPECT_LE(max_error_relative_to_scale(dinp, dinp_exact), tolerance) << describe(s);
    std::vector<double> dweight(s.C), dbias(s.C), dweight_exact(s.C), dbias_exact(s.C);
    backward_weight<E>(p, dweight, dbias);
    backward_weight<double>(p, dweight_exact, dbias_exact);
    EXPECT_LE(max_error_relative_to_scale(dweight, dweight_exact), tolerance) << describe(s);
    EXPECT_LE(max_error_relative_to_scale(dbias, dbias_exact), tolerance) << describe(s);
  }
}

// fp32 (2^-24 per rounding): row sums of at most 45 terms, an rsqrtf (2 ulp), and column
// sums of the weight gradient over 300 rows: a few 1e-7 of the scale.
TEST(LayerNorm, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9 relative rounding): the outputs and gradients are rounded once to bf16 after
// fp32 arithmetic, ~2e-3 of the scale, with margin for the fp32 sums.
TEST(LayerNorm, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

}  // namespace
