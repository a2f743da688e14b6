// The residual connection: out = a + b, elementwise. Its backward routes the same
// gradient to both inputs, so it is a single accumulation: each input's gradient buffer
// receives dout (+=). When, as in GPT-2, one of the inputs is the residual stream whose
// gradient buffer already is dout, only the other input needs the call. Instantiated for
// double, float and __nv_bfloat16 (bf16 storage, fp32 arithmetic). Buffers are the caller's.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

// out (N) = a (N) + b (N). Written (=). Saves nothing.
template <typename Element>
void residual_forward(Element* out, const Element* a, const Element* b, size_t N, cudaStream_t stream);

// dinp (N) += dout (N): the gradient of out = a + b with respect to a, and equally to b.
// Accumulated (+=); call once per input whose gradient buffer is not dout itself.
template <typename Element>
void residual_backward(Element* dinp, const Element* dout, size_t N, cudaStream_t stream);
