// Checks of the fused causal attention (kernels/fused_attention.cuh): the backward against finite
// differences of the forward in double, the forward, its log-sum-exp and the backward against
// the materialised kernels (kernels/attention.cuh) on shapes of several tiles with T not a
// multiple of a tile, causality, = semantics, float and bf16 against double, and the one line
// that refuses a head size the kernels cannot take.
#include <gtest/gtest.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/element.cuh"
#include "kernels/fused_attention.cuh"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/error_message.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

struct Shape {
  int B, T, C, NH;
};
// Small shapes for finite differences. The double kernels' tiles are 16 queries by 8 keys
// (forward) and 8 by 8 (backward), so T = 19 and 11 take several tiles of each, ending in a
// partial one; heads of 16, 32, 48 and 128 channels (1 to 8 threads per row).
const Shape kSmallShapes[] = {{1, 1, 16, 1}, {1, 5, 16, 1}, {2, 19, 32, 2}, {1, 11, 48, 1}, {1, 9, 128, 1}};
// Larger shapes against the materialised kernels: T = 67 is no multiple of any tile (float's
// 32 and 16, double's 16 and 8); heads of 16, 48, 64 (GPT-2's) and 128 channels; and T = 64, a
// whole number of tiles.
const Shape kLargeShapes[] = {{2, 67, 32, 2}, {2, 67, 96, 2}, {2, 67, 128, 2}, {2, 67, 256, 2}, {1, 64, 128, 2}};

std::string describe(const Shape& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C) + ", NH " +
         std::to_string(s.NH);
}
size_t input_size(const Shape& s) { return size_t(s.B) * s.T * 3 * s.C; }
size_t output_size(const Shape& s) { return size_t(s.B) * s.T * s.C; }
// q, k, v uniform in [-2, 2): logits q.k / sqrt(HS) spread over a few units, so that the row
// maximum moves from key tile to key tile and the online softmax's rescale matters.
std::vector<double> random_qkv(const Shape& s, uint64_t seed) { return random_values(input_size(s), seed, -2, 2); }

// The fused layer's device buffers in element type E.
template <typename E>
struct FusedLayer {
  FusedLayer(const Shape& s, const std::vector<double>& qkv)
      : shape(s),
        inp(convert<E>(qkv)),
        out(output_size(s)),
        lse(fused_attention_saved_size(s.B, s.T, s.NH)),
        scratch(fused_attention_backward_scratch_size(s.B, s.T, s.NH)),
        dinp(input_size(s)) {}
  void forward() {
    fused_attention_forward(out.data(), lse.data(), inp.data(), shape.B, shape.T, shape.C, shape.NH, nullptr);
  }
  void backward(const DeviceBuffer<E>& dout) {
    fused_attention_backward(dinp.data(), scratch.data(), dout.data(), inp.data(), out.data(), lse.data(), shape.B,
                             shape.T, shape.C, shape.NH, nullptr);
  }
  Shape shape;
  DeviceBuffer<E> inp, out;
  DeviceBuffer<Compute<E>> lse, scratch;
  DeviceBuffer<E> dinp;
};

template <typename E>
std::vector<double> fused_forward(const Shape& s, const std::vector<double>& qkv) {
  FusedLayer<E> layer(s, qkv);
  layer.forward();
  return to_double(layer.out.to_host());
}
template <typename E>
std::vector<double> fused_backward(const Shape& s, const std::vector<double>& qkv, const std::vector<double>& dout) {
  FusedLayer<E> layer(s, qkv);
  DeviceBuffer<E> d_dout(convert<E>(dout));
  layer.forward();
  layer.backward(d_dout);
  return to_double(layer.dinp.to_host());
}

// The materialised kernels in double: the reference of the larger shapes.
std::vector<double> materialised_forward(cublasHandle_t cublas, const Shape& s, const std::vector<double>& qkv) {
  DeviceBuffer<double> inp(qkv), out(output_size(s)), saved(attention_saved_size(s.B, s.T, s.C, s.NH)),
      scratch(attention_forward_scratch_size(s.B, s.T, s.C, s.NH));
  attention_forward(cublas, out.data(), saved.data(), scratch.data(), inp.data(), s.B, s.T, s.C, s.NH, nullptr);
  return out.to_host();
}
std::vector<double> materialised_backward(cublasHandle_t cublas, const Shape& s, const std::vector<double>& qkv,
                                          const std::vector<double>& dout) {
  DeviceBuffer<double> inp(qkv), out(output_size(s)), saved(attention_saved_size(s.B, s.T, s.C, s.NH)),
      forward_scratch(attention_forward_scratch_size(s.B, s.T, s.C, s.NH)),
      backward_scratch(attention_backward_scratch_size(s.B, s.T, s.C, s.NH)), d_dout(dout), dinp(input_size(s));
  attention_forward(cublas, out.data(), saved.data(), forward_scratch.data(), inp.data(), s.B, s.T, s.C, s.NH,
                    nullptr);
  attention_backward(cublas, dinp.data(), backward_scratch.data(), d_dout.data(), saved.data(), s.B, s.T, s.C, s.NH,
                     nullptr);
  return dinp.to_host();
}

TEST(FusedAttention, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kSmallShapes) {
    // q, k, v in [-1, 1): the double tiles are small enough that these rows still span several.
    std::vector<double> qkv = random_values(input_size(s), 201);
    const std::vector<double> projection = random_values(output_size(s), 202);
    const auto loss = [&](const std::vector<double>& x) { return project(fused_forward<double>(s, x), projection); };
    const std::vector<double> numeric = numeric_gradient(loss, qkv);
    // Central differences with h = 1e-5 in double (tests/gradient_check.h): their own rounding,
    // about 1e-16 |loss| / h, judged against entries down to 1e-3 of the gradient's scale, was up
    // to 3.4e-7 here (2026-11-27); a wrong term of the backward is off by far more.
    EXPECT_LE(max_relative_error(fused_backward<double>(s, qkv, projection), numeric), 1e-6) << describe(s);
  }
}

// Double against double: the two compute the same sums in other orders (the fused one rescales
// partial sums by exp(m_old - m_new)); sums of at most 128 products and 67 terms, and exps, each
// rounding 2^-53 relative: about 1e-14 of the scale, far below the bound.
TEST(FusedAttention, ForwardMatchesTheMaterialisedKernelsInDouble) {
  CublasHandle cublas;
  for (const Shape& s : kLargeShapes) {
    const std::vector<double> qkv = random_qkv(s, 211);
    EXPECT_LE(max_error_relative_to_scale(fused_forward<double>(s, qkv), materialised_forward(cublas, s, qkv)), 1e-12)
        << describe(s);
  }
}

TEST(FusedAttention, BackwardMatchesTheMaterialisedKernelsInDouble) {
  CublasHandle cublas;
  for (const Shape& s : kLargeShapes) {
    const std::vector<double> qkv = random_qkv(s, 221), dout = random_values(output_size(s), 222);
    const std::vector<double> reference = materialised_backward(cublas, s, qkv, dout);
    EXPECT_LE(max_error_relative_to_scale(fused_backward<double>(s, qkv, dout), reference), 1e-12) << describe(s);
  }
}

// lse[b, h, t] = log Σ_{j <= t} exp(q_t . k_j / sqrt(HS)), from a double loop on the host.
TEST(FusedAttention, SavesEachRowsLogSumExp) {
  const Shape s{2, 67, 64, 2};
  const int HS = s.C / s.NH;
  const std::vector<double> qkv = random_qkv(s, 231);
  FusedLayer<double> layer(s, qkv);
  layer.forward();
  const std::vector<double> lse = layer.lse.to_host();
  const auto at = [&](int b, int t, int part, int h, int d) {
    return qkv[(size_t(b) * s.T + t) * 3 * s.C + size_t(part) * s.C + h * HS + d];
  };
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        double sum = 0.0;
        for (int j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int d = 0; d < HS; ++d) dot += at(b, t, 0, h, d) * at(b, j, 1, h, d);
          sum += std::exp(dot / std::sqrt(double(HS)));
        }
        // |logits| stay below 2 * 2 * 64 / 8 = 32, so the unshifted exps neither overflow nor
        // lose the row: the two agree to double's rounding of a few dozen terms.
        ASSERT_NEAR(lse[(size_t(b) * s.NH + h) * s.T + t], std::log(sum), 1e-12)
            << "b " << b << ", h " << h << ", t " << t;
      }
}

TEST(FusedAttention, OutputAtTDoesNotDependOnLaterPositions) {
  const Shape s{1, 40, 32, 2};
  const std::vector<double> qkv = random_qkv(s, 241);
  const std::vector<double> out = fused_forward<double>(s, qkv);
  for (int t : {0, 7, 8, 15, 16, 31, 38}) {
    std::vector<double> changed = qkv;
    for (size_t i = size_t(t + 1) * 3 * s.C; i < changed.size(); ++i) changed[i] += 5.0;
    const std::vector<double> changed_out = fused_forward<double>(s, changed);
    // Later keys are never read for row t, whose sums are then the same operations on the same values.
    for (size_t i = 0; i < size_t(t + 1) * s.C; ++i)
      ASSERT_EQ(changed_out[i], out[i]) << "changed after t = " << t << ", element " << i;
  }
}

TEST(FusedAttention, BackwardOverwritesTheInputGradient) {
  const Shape s{2, 19, 32, 2};
  const std::vector<double> qkv = random_qkv(s, 251), dout = random_values(output_size(s), 252);
  FusedLayer<double> layer(s, qkv);
  DeviceBuffer<double> d_dout(dout);
  layer.dinp.upload(std::vector<double>(input_size(s), std::numeric_limits<double>::quiet_NaN()));
  layer.forward();
  layer.backward(d_dout);
  EXPECT_EQ(layer.dinp.to_host(), fused_backward<double>(s, qkv, dout));
}

// Each reduced-precision instantiation against the materialised kernels in double on the same
// (rounded) inputs, so only the rounding inside the fused kernels counts.
template <typename E>
void expect_close_to_double(double forward_tolerance, double backward_tolerance) {
  CublasHandle cublas;
  for (const Shape& s : kLargeShapes) {
    const std::vector<double> qkv = to_double(convert<E>(random_qkv(s, 261)));
    const std::vector<double> dout = to_double(convert<E>(random_values(output_size(s), 262)));
    const double forward_error =
        max_error_relative_to_scale(fused_forward<E>(s, qkv), materialised_forward(cublas, s, qkv));
    const double backward_error =
        max_error_relative_to_scale(fused_backward<E>(s, qkv, dout), materialised_backward(cublas, s, qkv, dout));
    EXPECT_LE(forward_error, forward_tolerance) << describe(s);
    EXPECT_LE(backward_error, backward_tolerance) << describe(s);
  }
}

// fp32 (u = 2^-24 = 6e-8): a logit is a sum of HS <= 128 products, the row's sum of exps and
// each output channel sums of at most 67 terms, and the backward's dq, dk, dv sums of 67 terms
// of products of such sums: a worst case of about (128 + 67 + 67) u = 1.6e-5 of the scale
// (|logits| up to ~10 amplify the logit's absolute error through exp); random roundings stay
// near its square root. The bound is that worst case, 2e-5.
TEST(FusedAttention, FloatMatchesDouble) { expect_close_to_double<float>(2e-5, 2e-5); }
// bf16 (2^-9 relative rounding per stored value; fp32 inside): the forward rounds only its
// output, once: 2^-9 = 2.0e-3 of an entry, at most that of the scale. The backward rounds dq,
// dk and dv once (2^-9), and its D is computed from the rounded output (off by 2^-9 of
// Σ|dout out|), which enters every ds: about 2 2^-9 of the scale, 3.9e-3; bounds 3e-3 and 6e-3
// leave fp32's part (above) a margin. The materialised kernels round four intermediates in bf16
// (tests/attention_test.cu: 2e-2).
TEST(FusedAttention, Bf16MatchesDouble) { expect_close_to_double<__nv_bfloat16>(3e-3, 6e-3); }

TEST(FusedAttention, RefusesHeadSizesItCannotTake) {
  const auto forward_of = [](int C, int NH) {
    return error_of([&] { fused_forward<float>(Shape{1, 4, C, NH}, std::vector<double>(size_t(4) * 3 * C, 0.0)); });
  };
  EXPECT_EQ(forward_of(160, 4),
            "fused attention: C = 160 channels in NH = 4 heads of HS = 40 channels: the head size must be a multiple "
            "of 16 up to 128");
  EXPECT_EQ(forward_of(288, 2),
            "fused attention: C = 288 channels in NH = 2 heads of HS = 144 channels: the head size must be a "
            "multiple of 16 up to 128");
  EXPECT_EQ(forward_of(100, 3),
            "fused attention: C = 100 channels in NH = 3 heads do not split into heads of equal size");
  const Shape s{1, 4, 72, 3};  // heads of 24
  const std::vector<double> zeros(input_size(s), 0.0);
  FusedLayer<float> layer(s, zeros);
  DeviceBuffer<float> dout(output_size(s));
  EXPECT_EQ(error_of([&] { layer.backward(dout); }),
            "fused attention: C = 72 channels in NH = 3 heads of HS = 24 channels: the head size must be a multiple "
            "of 16 up to 128");
}

}  // namespace
