// The data-parallel sum of a stage's gradients, in buckets started while the backward goes on.
// A bucket is one contiguous range of the stage's gradient allocation: one layer's 12 tensors
// (the stage allocation is layer-major, model/parameter_layout.h), with wpe folded into the
// embedding chunk's first layer and lnfw, lnfb into the head chunk's last layer, where they lie
// next to each other. The executor reports when a layer's gradients are final (the chunk's last
// B, or W for the split backwards); queue_final_buckets then records an event on the compute
// stream, makes the reduction stream wait for it and queues the bucket's all-reduce there, so
// the sum runs while the compute stream goes on with the earlier layers. wte is its own bucket,
// queued after the tied-embedding sum (finish_data_parallel_sum); then the compute stream waits
// for the reduction stream, so that the norm, AdamW and the next step's gradient memset come after
// every sum. Only with replicas (dp > 1): with one there is nothing to sum.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "comm/groups.h"
#include "model/parameter_layout.h"

struct GradientBucket {
  size_t offset, count;  // elements of the stage's gradient allocation
  int chunk;             // the stage's chunk whose backward makes it final
  int layer;             // queued when the executor reports this layer final; -1: the chunk's whole backward
};

// The layer buckets of a stage, in chunk and layer order (not wte: see wte_bucket). Each layer
// is in exactly one; with wte_bucket they cover the stage allocation exactly once.
std::vector<GradientBucket> gradient_buckets(const ParameterLayout& layout);
// wte's range (count 0 on a stage without it).
GradientBucket wte_bucket(const ParameterLayout& layout);

struct GradientBuckets {
  std::vector<GradientBucket> buckets;  // gradient_buckets(layout)
  GradientBucket wte;                   // wte_bucket(layout)
  cudaStream_t stream = nullptr;        // the reduction stream (nullptr: dp = 1, no buckets)
  std::vector<cudaEvent_t> ready;       // per bucket, then wte: its gradients final on the compute stream
  cudaEvent_t done = nullptr;           // the reduction stream's last sum
  std::vector<int> queued;  // the step's buckets in the order queued (indices, wte's = buckets.size()); the caller
                            // clears it before the step
};

GradientBuckets create_gradient_buckets(const ParameterLayout& layout, const CommGroups& groups);
void destroy_gradient_buckets(GradientBuckets& buckets);

// The executor's report: (chunk, layer) final on compute; queues the buckets it completes.
template <typename Element>
void queue_final_buckets(GradientBuckets& buckets, const CommGroups& groups, Element* gradients, int chunk, int layer,
                         cudaStream_t compute);
// After the tied-embedding sum on compute: wte's bucket, then compute waits for every sum. Throws
// when a layer bucket was not queued once since queued was cleared (the executor did not report it).
template <typename Element>
void finish_data_parallel_sum(GradientBuckets& buckets, const CommGroups& groups, Element* gradients,
                              cudaStream_t compute);
