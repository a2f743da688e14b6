// Checks of the fully connected layer (kernels/matmul.cuh): the forward against a
// double loop, the bias added after the product, both backward functions against finite
// differences of the forward, float and bf16 against double, the accumulation of the parameter gradients, the bias
// gradient's sum over several chunks of rows, and the bf16 bias gradient over 1024 rows
// against the bound of its fp32 accumulation.
#include <gtest/gtest.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cublas_check.cuh"
#include "kernels/matmul.cuh"
#include "tests/bf16_sum_bound.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

struct Shape {
  int N, C, OC;
};
// Single rows and columns; C and OC that are not multiples of 4 or 32; N not a multiple
// of the bias gradient's 16 row groups; OC over one 32-column block of the bias gradient,
// and over the bias broadcast's 128 threads of a row.
const Shape kShapes[] = {{1, 1, 1}, {7, 12, 5}, {37, 13, 45}, {5, 3, 33}, {3, 4, 300}};

std::string describe(const Shape& s) {
  return "N " + std::to_string(s.N) + ", C " + std::to_string(s.C) + ", OC " + std::to_string(s.OC);
}

// The layer's inputs and the weight of the projection that makes the loss.
struct Problem {
  Shape shape;
  std::vector<double> inp, weight, bias, dout;  // (N, C), (OC, C), (OC), (N, OC)
};
Problem random_problem(const Shape& s, uint64_t seed) {
  return {s, random_values(size_t(s.N) * s.C, seed), random_values(size_t(s.OC) * s.C, seed + 1),
          random_values(s.OC, seed + 2), random_values(size_t(s.N) * s.OC, seed + 3)};
}

// The layer in element type T on inputs given in double (rounded to T), results widened to double.
template <typename T>
std::vector<double> forward(cublasHandle_t cublas, const Shape& s, const std::vector<double>& inp,
                            const std::vector<double>& weight, const std::vector<double>* bias) {
  DeviceBuffer<T> d_inp(convert<T>(inp)), d_weight(convert<T>(weight)), d_out(size_t(s.N) * s.OC);
  DeviceBuffer<T> d_bias(convert<T>(bias != nullptr ? *bias : std::vector<double>(s.OC)));
  matmul_forward(cublas, d_out.data(), d_inp.data(), d_weight.data(), bias != nullptr ? d_bias.data() : nullptr, s.N,
                 s.C, s.OC, nullptr);
  return to_double(d_out.to_host());
}
template <typename T>
std::vector<double> backward_input(cublasHandle_t cublas, const Problem& p) {
  const Shape& s = p.shape;
  DeviceBuffer<T> d_dout(convert<T>(p.dout)), d_weight(convert<T>(p.weight)), d_dinp(size_t(s.N) * s.C);
  matmul_backward_input(cublas, d_dinp.data(), d_dout.data(), d_weight.data(), s.N, s.C, s.OC, nullptr);
  return to_double(d_dinp.to_host());
}
// dweight and dbias added onto the given starting values.
template <typename T>
void backward_weight(cublasHandle_t cublas, const Problem& p, std::vector<double>& dweight,
                     std::vector<double>& dbias) {
  const Shape& s = p.shape;
  DeviceBuffer<T> d_dout(convert<T>(p.dout)), d_inp(convert<T>(p.inp));
  DeviceBuffer<T> d_dweight(convert<T>(dweight)), d_dbias(convert<T>(dbias));
  DeviceBuffer<Compute<T>> d_workspace(matmul_bias_gradient_workspace_size(s.N, s.OC));
  matmul_backward_weight(cublas, d_dweight.data(), d_dbias.data(), d_workspace.data(), d_dout.data(), d_inp.data(),
                         s.N, s.C, s.OC, nullptr);
  dweight = to_double(d_dweight.to_host());
  dbias = to_double(d_dbias.to_host());
}

// out[n, o] = bias[o] + sum_c inp[n, c] weight[o, c], in double.
std::vector<double> reference_forward(const Problem& p, bool with_bias) {
  const Shape& s = p.shape;
  std::vector<double> out(size_t(s.N) * s.OC);
  for (int n = 0; n < s.N; ++n)
    for (int o = 0; o < s.OC; ++o) {
      double sum = with_bias ? p.bias[o] : 0.0;
      for (int c = 0; c < s.C; ++c) sum += p.inp[size_t(n) * s.C + c] * p.weight[size_t(o) * s.C + c];
      out[size_t(n) * s.OC + o] = sum;
    }
  return out;
}

TEST(Matmul, ForwardMatchesDoubleLoop) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    const Problem p = random_problem(s, 11);
    // Double accumulations of at most 13 products of magnitude <= 1: rounding stays below 1e-14.
    EXPECT_LE(max_relative_error(forward<double>(cublas, s, p.inp, p.weight, &p.bias), reference_forward(p, true)),
              1e-12)
        << describe(s);
    EXPECT_LE(max_relative_error(forward<double>(cublas, s, p.inp, p.weight, nullptr), reference_forward(p, false)),
              1e-12)
        << describe(s) << ", no bias";
  }
}

// The bias added to a finished product (the row-parallel layer's, after its sum over the tp ranks)
// gives the forward with the bias: in double the two differ only in where the bias enters the
// rounded sum, far below 1e-12. Every row gets it: OC = 300 spans the add's 128 threads a row.
TEST(Matmul, BiasAddedAfterTheProductGivesTheForwardWithBias) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    const Problem p = random_problem(s, 15);
    DeviceBuffer<double> product(forward<double>(cublas, s, p.inp, p.weight, nullptr)), bias(p.bias);
    matmul_add_bias(product.data(), bias.data(), s.N, s.OC, nullptr);
    EXPECT_LE(max_relative_error(product.to_host(), forward<double>(cublas, s, p.inp, p.weight, &p.bias)), 1e-12)
        << describe(s);
  }
}

TEST(Matmul, BackwardInputMatchesFiniteDifferences) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    Problem p = random_problem(s, 21);
    const auto loss = [&](const std::vector<double>& inp) {
      return project(forward<double>(cublas, s, inp, p.weight, &p.bias), p.dout);
    };
    const std::vector<double> numeric = numeric_gradient(loss, p.inp);
    EXPECT_LE(max_relative_error(backward_input<double>(cublas, p), numeric), 1e-6) << describe(s);
  }
}

TEST(Matmul, BackwardWeightMatchesFiniteDifferences) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    Problem p = random_problem(s, 31);
    const auto loss_of_weight = [&](const std::vector<double>& weight) {
      return project(forward<double>(cublas, s, p.inp, weight, &p.bias), p.dout);
    };
    const auto loss_of_bias = [&](const std::vector<double>& bias) {
      return project(forward<double>(cublas, s, p.inp, p.weight, &bias), p.dout);
    };
    const std::vector<double> numeric_dweight = numeric_gradient(loss_of_weight, p.weight);
    const std::vector<double> numeric_dbias = numeric_gradient(loss_of_bias, p.bias);
    std::vector<double> dweight(p.weight.size()), dbias(p.bias.size());
    backward_weight<double>(cublas, p, dweight, dbias);
    EXPECT_LE(max_relative_error(dweight, numeric_dweight), 1e-6) << describe(s);
    EXPECT_LE(max_relative_error(dbias, numeric_dbias), 1e-6) << describe(s);
  }
}

TEST(Matmul, WeightGradientsAccumulate) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    const Problem p = random_problem(s, 41);
    const std::vector<double> dweight0 = random_values(p.weight.size(), 42), dbias0 = random_values(p.bias.size(), 43);
    std::vector<double> dweight = dweight0, dbias = dbias0;
    backward_weight<double>(cublas, p, dweight, dbias);
    const std::vector<double> dweight1 = dweight, dbias1 = dbias;
    backward_weight<double>(cublas, p, dweight, dbias);
    // Two calls add twice the increment of one; the only error is double rounding of the sums.
    std::vector<double> twice_dweight(dweight0.size()), twice_dbias(dbias0.size()), increments(dweight0.size()),
        bias_increments(dbias0.size());
    for (size_t i = 0; i < dweight0.size(); ++i) {
      twice_dweight[i] = 2 * (dweight1[i] - dweight0[i]);
      increments[i] = dweight[i] - dweight0[i];
    }
    for (size_t i = 0; i < dbias0.size(); ++i) {
      twice_dbias[i] = 2 * (dbias1[i] - dbias0[i]);
      bias_increments[i] = dbias[i] - dbias0[i];
    }
    EXPECT_LE(max_relative_error(increments, twice_dweight), 1e-12) << describe(s);
    EXPECT_LE(max_relative_error(bias_increments, twice_dbias), 1e-12) << describe(s);
  }
}

TEST(Matmul, BackwardWeightWithoutBiasGivesTheSameWeightGradient) {
  CublasHandle cublas;
  const Shape s{7, 12, 5};
  const Problem p = random_problem(s, 51);
  DeviceBuffer<double> d_dout(p.dout), d_inp(p.inp), d_dweight(std::vector<double>(p.weight.size()));
  matmul_backward_weight(cublas, d_dweight.data(), static_cast<double*>(nullptr), nullptr, d_dout.data(),
                         d_inp.data(), s.N, s.C, s.OC, nullptr);
  std::vector<double> dweight(p.weight.size()), dbias(p.bias.size());
  backward_weight<double>(cublas, p, dweight, dbias);
  EXPECT_EQ(d_dweight.to_host(), dweight);
}

// The bias gradient over several chunks of the kernel's 512 rows (N = 1500: two full chunks and
// one of 476 rows) and several 32-column tiles (OC = 70: two full tiles and one of 6), added onto
// a random dbias, against a double sum of each column. An fp32 entry adds each term through at
// most 32 sums in its row group, 16 over the groups, 3 over the chunks and 1 onto dbias: its
// error is at most 52 2^-24 times the sum of the magnitudes added (|dbias| and the column's
// |dout|); double, 52 2^-53 of it. The reference sums in long double (x86's 64-bit significand,
// 1501 additions: 2^-53 of the magnitudes at most). A chunk summed twice or left out is off by a
// whole chunk's sum.
template <typename T>
void expect_bias_gradient_over_chunks_matches_double_sum(double roundoff) {
  CublasHandle cublas;
  const Shape s{1500, 3, 70};
  const Problem p = random_problem(s, 71);
  const std::vector<double> dbias0 = random_values(s.OC, 72);
  std::vector<double> dweight(p.weight.size()), dbias = dbias0;
  backward_weight<T>(cublas, p, dweight, dbias);
  for (int o = 0; o < s.OC; ++o) {
    long double sum = dbias0[o], magnitude = std::fabs(dbias0[o]);
    for (int n = 0; n < s.N; ++n) {
      sum += p.dout[size_t(n) * s.OC + o];
      magnitude += std::fabs(p.dout[size_t(n) * s.OC + o]);
    }
    EXPECT_LE(std::fabs(dbias[o] - double(sum)), 52 * roundoff * double(magnitude)) << "column " << o;
  }
}

TEST(Matmul, BiasGradientOverSeveralRowChunksMatchesDoubleSum) {
  expect_bias_gradient_over_chunks_matches_double_sum<float>(std::ldexp(1.0, -24));
  expect_bias_gradient_over_chunks_matches_double_sum<double>(std::ldexp(1.0, -53));
}

// The bf16 bias gradient at a realistic row count (N = 1024 = B T of 8 x 128 and two chunks;
// OC = 96, three tiles), onto a bf16 dbias, within the bound of tests/bf16_sum_bound.h: each
// term passes through at most 512 / 16 = 32 sums in its row group, 16 over the groups, 1 over
// the chunks and 1 onto dbias (K = 50, R = 0: the inputs are bf16 already), so E is 50 2^-24 of
// the column's magnitudes: E <= 0.0016 here, about 1/20 of half a bf16 ulp at the mean |sum|
// (14). Measured (CPU build, 2026-11-26), the worst error in units of the bound: 0.97 (the
// correctly rounded sums); with the row-group partials kept in bf16 (rounded 32 times each), 60.
TEST(Matmul, Bf16BiasGradientOverRealisticRowsIsTheRoundedSum) {
  CublasHandle cublas;
  const Shape s{1024, 3, 96};
  Problem p = random_problem(s, 81);
  p.dout = to_double(convert<__nv_bfloat16>(p.dout));
  const std::vector<double> dbias0 = to_double(convert<__nv_bfloat16>(random_values(s.OC, 82)));
  std::vector<double> dweight(p.weight.size()), dbias = dbias0, exact(s.OC), error(s.OC);
  backward_weight<__nv_bfloat16>(cublas, p, dweight, dbias);
  for (int o = 0; o < s.OC; ++o) {
    long double sum = dbias0[o], magnitude = std::fabs(dbias0[o]);
    for (int n = 0; n < s.N; ++n) {
      sum += p.dout[size_t(n) * s.OC + o];
      magnitude += std::fabs(p.dout[size_t(n) * s.OC + o]);
    }
    exact[o] = double(sum);
    error[o] = fp32_sum_error_bound(32 + 16 + 1 + 1, 0, double(magnitude));
  }
  EXPECT_LE(worst_error_in_bf16_sum_bounds(dbias, exact, error), 1.0);
}

// Each reduced-precision instantiation against double on the same (rounded) inputs, so
// only the rounding inside the layer counts.
template <typename T>
void expect_close_to_double(double tolerance) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    const Problem exact = random_problem(s, 61);
    const Problem p{s, to_double(convert<T>(exact.inp)), to_double(convert<T>(exact.weight)),
                    to_double(convert<T>(exact.bias)), to_double(convert<T>(exact.dout))};
    EXPECT_LE(max_error_relative_to_scale(forward<T>(cublas, s, p.inp, p.weight, &p.bias),
                                 forward<double>(cublas, s, p.inp, p.weight, &p.bias)),
              tolerance)
        << describe(s);
    EXPECT_LE(max_error_relative_to_scale(backward_input<T>(cublas, p), backward_input<double>(cublas, p)), tolerance)
        << describe(s);
    std::vector<double> dweight(p.weight.size()), dbias(p.bias.size());
    std::vector<double> reference_dweight = dweight, reference_dbias = dbias;
    backward_weight<T>(cublas, p, dweight, dbias);
    backward_weight<double>(cublas, p, reference_dweight, reference_dbias);
    EXPECT_LE(max_error_relative_to_scale(dweight, reference_dweight), tolerance) << describe(s);
    EXPECT_LE(max_error_relative_to_scale(dbias, reference_dbias), tolerance) << describe(s);
  }
}

// fp32 sums of at most 45 products of magnitude <= 1 (2^-24 each): about 3e-6 of the scale.
TEST(Matmul, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9 relative rounding) stores each result once, after fp32 accumulation, but
// dweight's += adds a second rounding: about 4e-3 of the scale, with margin for the sums.
TEST(Matmul, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

}  // namespace
