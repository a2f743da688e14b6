// The waits of a forward for parameters another stream may still be writing (model/parameters_pending.h).
#include "model/parameters_pending.h"

#include "kernels/cuda_check.cuh"

void wait_for_parameters(const ParametersPending* pending, int layer, cudaStream_t stream) {
  if (pending == nullptr || pending->before[layer + 1] == nullptr) return;
  CUDA_CHECK(cudaStreamWaitEvent(stream, pending->before[layer + 1], 0));
}
