// GELU, tanh approximation (see kernels/gelu.cuh): the forward and backward bodies, one element
// each (kernels/elementwise.cuh), then the launchers.
#include "kernels/gelu.cuh"

#include "kernels/element.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/exponential.cuh"

namespace {

// The logistic function at 2 u and at -2 u, from one exponential that cannot overflow.
// (1 + tanh u) / 2 = sigmoid(2 u), so gelu(x) = x sigmoid(2 u): the same function as GPT-2's,
// without the cancellation of 1 + tanh u for negative x (in fp32 it loses a few 1e-3 of gelu at
// x = -4).
template <typename Real>
struct Sigmoids {
  Real at_2u, at_minus_2u;
};
template <typename Real>
__device__ Sigmoids<Real> sigmoids_of_2u(Real u) {
  const Real e = exponential(-2 * (u < 0 ? -u : u));  // in (0, 1]
  const Real large = 1 / (1 + e), small = e / (1 + e);    // sigmoid(2 |u|), sigmoid(-2 |u|)
  return u >= 0 ? Sigmoids<Real>{large, small} : Sigmoids<Real>{small, large};
}

// u = sqrt(2 / pi) (x + 0.044715 x^3), GPT-2's argument of tanh.
template <typename Real>
__device__ Real gelu_argument(Real x) {
  return Real(0.7978845608028654) * (x + Real(0.044715) * x * x * x);
}

template <typename Element>
struct GeluForward {
  Element* out;
  const Element* inp;
  __device__ void operator()(size_t i) const {
    using Real = Compute<Element>;
    const Real x = to_compute(inp[i]);
    out[i] = from_compute<Element>(x * sigmoids_of_2u(gelu_argument(x)).at_2u);
  }
};

// d gelu / dx = sigmoid(2u) + x 2 sigmoid(2u) sigmoid(-2u) du/dx, du/dx = sqrt(2 / pi) (1 + 3 0.044715 x^2).
template <typename Element>
struct GeluBackward {
  Element* dinp;
  const Element* inp;
  const Element* dout;
  __device__ void operator()(size_t i) const {
    using Real = Compute<Element>;
    const Real x = to_compute(inp[i]);
    const Sigmoids<Real> s = sigmoids_of_2u(gelu_argument(x));
    const Real du_dx = Real(0.7978845608028654) * (1 + 3 * Real(0.044715) * x * x);
    const Real derivative = s.at_2u + 2 * x * s.at_2u * s.at_minus_2u * du_dx;
    dinp[i] = from_compute<Element>(derivative * to_compute(dout[i]));
  }
};

}  // namespace

// ---- launchers ----

template <typename Element>
void gelu_forward(Element* out, const Element* inp, size_t N, cudaStream_t stream) {
  launch_elementwise(GeluForward<Element>{out, inp}, N, stream);
}

template <typename Element>
void gelu_backward(Element* dinp, const Element* inp, const Element* dout, size_t N, cudaStream_t stream) {
  launch_elementwise(GeluBackward<Element>{dinp, inp, dout}, N, stream);
}

#define INSTANTIATE_GELU(Element)                                                          \
  template void gelu_forward<Element>(Element*, const Element*, size_t, cudaStream_t); \
  template void gelu_backward<Element>(Element*, const Element*, const Element*, size_t, cudaStream_t);
INSTANTIATE_GELU(double)
INSTANTIATE_GELU(float)
INSTANTIATE_GELU(__nv_bfloat16)
