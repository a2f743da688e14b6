// Checks of causal multi-head self-attention (kernels/attention.cuh): the forward
// against a double loop, the saved probabilities, causality, the backward against
// finite differences of the forward, its = semantics, and float and bf16 against double.
#include <gtest/gtest.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/cublas_check.cuh"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

struct Shape {
  int B, T, C, NH;
};
// T = 1 (a single unmasked column); one head; heads of 1, 3, 4 and 5 channels; C not a
// multiple of 4; T over one warp's 32 columns; B * NH * T rows not a multiple of the
// softmax's 8 rows per block; heads of 35 channels, over the permutes' 32 lanes, and 6
// heads, over their 4 warps.
const Shape kShapes[] = {{1, 1, 12, 3}, {2, 7, 12, 3}, {1, 5, 7, 1},  {2, 7, 10, 2},
                         {1, 33, 6, 2}, {3, 4, 3, 3},  {1, 3, 70, 2}, {1, 3, 18, 6}};

std::string describe(const Shape& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C) + ", NH " +
         std::to_string(s.NH);
}
size_t input_size(const Shape& s) { return size_t(s.B) * s.T * 3 * s.C; }
size_t output_size(const Shape& s) { return size_t(s.B) * s.T * s.C; }

// One attention layer's device buffers in element type E.
template <typename E>
struct Layer {
  Layer(const Shape& s, const std::vector<double>& qkv)
      : shape(s),
        inp(convert<E>(qkv)),
        out(output_size(s)),
        saved(attention_saved_size(s.B, s.T, s.C, s.NH)),
        forward_scratch(attention_forward_scratch_size(s.B, s.T, s.C, s.NH)),
        backward_scratch(attention_backward_scratch_size(s.B, s.T, s.C, s.NH)),
        dinp(input_size(s)) {}
  void forward(cublasHandle_t cublas) {
    attention_forward(cublas, out.data(), saved.data(), forward_scratch.data(), inp.data(), shape.B, shape.T,
                      shape.C, shape.NH, nullptr);
  }
  void backward(cublasHandle_t cublas, const DeviceBuffer<E>& dout) {
    attention_backward(cublas, dinp.data(), backward_scratch.data(), dout.data(), saved.data(), shape.B, shape.T,
                       shape.C, shape.NH, nullptr);
  }
  Shape shape;
  DeviceBuffer<E> inp, out, saved, forward_scratch, backward_scratch, dinp;
};

template <typename E>
std::vector<double> forward(cublasHandle_t cublas, const Shape& s, const std::vector<double>& qkv) {
  Layer<E> layer(s, qkv);
  layer.forward(cublas);
  return to_double(layer.out.to_host());
}
template <typename E>
std::vector<double> backward(cublasHandle_t cublas, const Shape& s, const std::vector<double>& qkv,
                             const std::vector<double>& dout) {
  Layer<E> layer(s, qkv);
  DeviceBuffer<E> d_dout(convert<E>(dout));
  layer.forward(cublas);
  layer.backward(cublas, d_dout);
  return to_double(layer.dinp.to_host());
}

// out[b, t, h HS + d] = sum_{j <= t} softmax_j(q_t . k_j / sqrt(HS)) v_j[d] for head h, in double.
std::vector<double> reference_forward(const Shape& s, const std::vector<double>& qkv) {
  const int HS = s.C / s.NH;
  std::vector<double> out(output_size(s));
  const auto at = [&](int b, int t, int part, int h, int d) {
    return qkv[(size_t(b) * s.T + t) * 3 * s.C + size_t(part) * s.C + h * HS + d];
  };
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        std::vector<double> weights(t + 1);
        double max_logit = -INFINITY, sum = 0.0;
        for (int j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int d = 0; d < HS; ++d) dot += at(b, t, 0, h, d) * at(b, j, 1, h, d);
          weights[j] = dot / std::sqrt(double(HS));
          max_logit = std::max(max_logit, weights[j]);
        }
        for (double& w : weights) sum += w = std::exp(w - max_logit);
        for (int d = 0; d < HS; ++d) {
          double value = 0.0;
          for (int j = 0; j <= t; ++j) value += weights[j] / sum * at(b, j, 2, h, d);
          out[(size_t(b) * s.T + t) * s.C + h * HS + d] = value;
        }
      }
  return out;
}

TEST(Attention, ForwardMatchesDoubleLoop) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    const std::vector<double> qkv = random_values(input_size(s), 101);
    // Double sums of at most 33 terms of magnitude <= 1 and exps: rounding below 1e-14.
    EXPECT_LE(max_relative_error(forward<double>(cublas, s, qkv), reference_forward(s, qkv)), 1e-12) << describe(s);
  }
}

TEST(Attention, SavedProbabilitiesAreCausalRowsSummingToOne) {
  CublasHandle cublas;
  const Shape s{2, 7, 12, 3};
  Layer<double> layer(s, random_values(input_size(s), 111));
  layer.forward(cublas);
  const std::vector<double> saved = layer.saved.to_host();
  const double* att = saved.data() + 3 * output_size(s);  // (B, NH, T, T) after q, k, v
  for (int row = 0; row < s.B * s.NH * s.T; ++row) {
    const int t = row % s.T;
    double sum = 0.0;
    for (int j = 0; j < s.T; ++j) {
      const double p = att[size_t(row) * s.T + j];
      if (j > t) {
        EXPECT_EQ(p, 0.0) << "row " << row << ", column " << j;
      }
      EXPECT_GE(p, 0.0);
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-14) << "row " << row;
  }
}

TEST(Attention, OutputAtTDoesNotDependOnLaterPositions) {
  CublasHandle cublas;
  const Shape s{2, 7, 12, 3};
  const std::vector<double> qkv = random_values(input_size(s), 121);
  const std::vector<double> out = forward<double>(cublas, s, qkv);
  for (int t = 0; t + 1 < s.T; ++t) {
    std::vector<double> changed = qkv;
    for (int b = 0; b < s.B; ++b)
      for (size_t i = (size_t(b) * s.T + t + 1) * 3 * s.C; i < size_t(b + 1) * s.T * 3 * s.C; ++i) changed[i] += 5.0;
    const std::vector<double> changed_out = forward<double>(cublas, s, changed);
    // Masked probabilities are exactly 0, so later positions add exact zeros: equality is exact.
    for (int b = 0; b < s.B; ++b)
      for (size_t i = size_t(b) * s.T * s.C; i < (size_t(b) * s.T + t + 1) * s.C; ++i)
        ASSERT_EQ(changed_out[i], out[i]) << "changed after t = " << t << ", element " << i;
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    std::vector<double> qkv = random_values(input_size(s), 131);
    const std::vector<double> projection = random_values(output_size(s), 132);
    const auto loss = [&](const std::vector<double>& x) { return project(forward<double>(cublas, s, x), projection); };
    const std::vector<double> numeric = numeric_gradient(loss, qkv);
    EXPECT_LE(max_relative_error(backward<double>(cublas, s, qkv, projection), numeric), 1e-6) << describe(s);
  }
}

TEST(Attention, BackwardOverwritesTheInputGradient) {
  CublasHandle cublas;
  const Shape s{2, 7, 12, 3};
  const std::vector<double> qkv = random_values(input_size(s), 141), dout = random_values(output_size(s), 142);
  Layer<double> layer(s, qkv);
  DeviceBuffer<double> d_dout(dout);
  layer.dinp.upload(std::vector<double>(input_size(s), std::numeric_limits<double>::quiet_NaN()));
  layer.forward(cublas);
  layer.backward(cublas, d_dout);
  EXPECT_EQ(layer.dinp.to_host(), backward<double>(cublas, s, qkv, dout));
}

// Each reduced-precision instantiation against double on the same (rounded) inputs, so
// only the rounding inside the layer counts.
template <typename E>
void expect_close_to_double(double tolerance) {
  CublasHandle cublas;
  for (const Shape& s : kShapes) {
    const std::vector<double> qkv = to_double(convert<E>(random_values(input_size(s), 151)));
    const std::vector<double> dout = to_double(convert<E>(random_values(output_size(s), 152)));
    EXPECT_LE(max_error_relative_to_scale(forward<E>(cublas, s, qkv), forward<double>(cublas, s, qkv)), tolerance)
        << describe(s);
    EXPECT_LE(max_error_relative_to_scale(backward<E>(cublas, s, qkv, dout), backward<double>(cublas, s, qkv, dout)),
              tolerance)
        << describe(s);
  }
}

// fp32 (2^-24 per rounding) through sums of at most 33 terms, an exp and a division per
// probability: a few 1e-7 of the scale at most.
TEST(Attention, FloatMatchesDouble) { expect_close_to_double<float>(1e-5); }
// bf16 (2^-9 relative rounding) stores the logits, the probabilities, the per-head outputs
// and in the backward the gradients of the logits: a chain of about four roundings, ~8e-3
// of the scale, with margin for the fp32 sums.
TEST(Attention, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(2e-2); }

}  // namespace
