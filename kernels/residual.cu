// The residual connection (see kernels/residual.cuh): elementwise add and gradient
// accumulation, one element per body (kernels/elementwise.cuh), then the launchers.
#include "kernels/residual.cuh"

#include "kernels/element.cuh"
#include "kernels/elementwise.cuh"

namespace {

template <typename Element>
struct ResidualForward {
  Element* out;
  const Element* a;
  const Element* b;
  __device__ void operator()(size_t i) const { out[i] = from_compute<Element>(to_compute(a[i]) + to_compute(b[i])); }
};

template <typename Element>
struct ResidualBackward {
  Element* dinp;
  const Element* dout;
  __device__ void operator()(size_t i) const {
    dinp[i] = from_compute<Element>(to_compute(dinp[i]) + to_compute(dout[i]));
  }
};

}  // namespace

// ---- launchers ----

template <typename Element>
void residual_forward(Element* out, const Element* a, const Element* b, size_t N, cudaStream_t stream) {
  launch_elementwise(ResidualForward<Element>{out, a, b}, N, stream);
}

template <typename Element>
void residual_backward(Element* dinp, const Element* dout, size_t N, cudaStream_t stream) {
  launch_elementwise(ResidualBackward<Element>{dinp, dout}, N, stream);
}

#define INSTANTIATE_RESIDUAL(Element)                                                                    \
  template void residual_forward<Element>(Element*, const Element*, const Element*, size_t, cudaStream_t); \
  template void residual_backward<Element>(Element*, const Element*, size_t, cudaStream_t);
INSTANTIATE_RESIDUAL(double)
INSTANTIATE_RESIDUAL(float)
INSTANTIATE_RESIDUAL(__nv_bfloat16)
