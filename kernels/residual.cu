// The residual connection (see kernels/residual.cuh): elementwise add and gradient
// accumulation, one thread per element, then the launchers.
#include "kernels/residual.cuh"

#include "kernels/element.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int kThreads = 256;

template <typename Element>
__global__ void residual_forward_kernel(Element* out, const Element* a, const Element* b, size_t N) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N) out[i] = from_compute<Element>(to_compute(a[i]) + to_compute(b[i]));
}

template <typename Element>
__global__ void residual_backward_kernel(Element* dinp, const Element* dout, size_t N) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N) dinp[i] = from_compute<Element>(to_compute(dinp[i]) + to_compute(dout[i]));
}

unsigned blocks_for(size_t count) { return unsigned((count + kThreads - 1) / kThreads); }

}  // namespace

// ---- launchers ----

template <typename Element>
void residual_forward(Element* out, const Element* a, const Element* b, size_t N, cudaStream_t stream) {
  launch(residual_forward_kernel<Element>, dim3(blocks_for(N)), dim3(kThreads), 0, stream, out, a, b, N);
}

template <typename Element>
void residual_backward(Element* dinp, const Element* dout, size_t N, cudaStream_t stream) {
  launch(residual_backward_kernel<Element>, dim3(blocks_for(N)), dim3(kThreads), 0, stream, dinp, dout, N);
}

#define INSTANTIATE_RESIDUAL(Element)                                                                    \
  template void residual_forward<Element>(Element*, const Element*, const Element*, size_t, cudaStream_t); \
  template void residual_backward<Element>(Element*, const Element*, size_t, cudaStream_t);
INSTANTIATE_RESIDUAL(double)
INSTANTIATE_RESIDUAL(float)
INSTANTIATE_RESIDUAL(__nv_bfloat16)
