// What a forward waits for before it reads a stage's parameters while another stream may still be
// writing them: ZeRO-1's all-gather (comm/data_parallel_sum.h) broadcasts the updated parameters
// bucket by bucket on the reduction stream after the update, each bucket recording an event, and the
// next forward of each layer waits on its own stream for the event of the last bucket it reads, so
// the later layers' broadcasts run under the earlier layers' forward. The parameters' views carry
// the events (ParameterTensors::pending), so every forward that reads them waits (the step's,
// validation's, sampling's) without being told; the host's copies wait anyway (cudaMemcpy on the
// legacy default stream waits for every blocking stream, the reduction stream included).
#pragma once
#include <cuda_runtime.h>

#include <vector>

struct ParametersPending {
  // index layer + 1: 0 the embedding (wte, wpe), 1 .. L the layers, L + 1 the head (lnfw, lnfb,
  // wte); nullptr: nothing of the stage to wait for.
  std::vector<cudaEvent_t> before;
};

// Which events: model/gradient_buckets.h's parameters_pending.
// stream waits for the parameters of layer (-1: the embedding, num_layers: the head), when pending
// (may be nullptr) has an event for it.
void wait_for_parameters(const ParametersPending* pending, int layer, cudaStream_t stream);
