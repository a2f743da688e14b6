// GELU with GPT-2's tanh approximation:
// gelu(x) = x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), elementwise, and its
// gradient. Computed as x sigmoid(2 sqrt(2 / pi) (x + 0.044715 x^3)), the same function
// without fp32 cancellation for negative x. Instantiated for double, float and
// __nv_bfloat16 (bf16 storage, fp32 arithmetic). Buffers are the caller's.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

// out (N) = gelu(inp (N)), N = B T 4C in the MLP. Written (=). Saves nothing: the backward
// reads inp.
template <typename Element>
void gelu_forward(Element* out, const Element* inp, size_t N, cudaStream_t stream);

// dinp (N) = gelu'(inp (N)) * dout (N). Written (=). May run in place (dinp == dout).
template <typename Element>
void gelu_backward(Element* dinp, const Element* inp, const Element* dout, size_t N, cudaStream_t stream);
