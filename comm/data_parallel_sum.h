// The data-parallel sum of a stage's gradients, in buckets started while the backward goes on.
// A bucket is one contiguous range of the stage's gradient allocation (which ranges, and which
// layer makes each final, the model says: model/gradient_buckets.h). The executor reports when a layer's gradients are final (the chunk's last
// B, or W for the split backwards); queue_final_buckets then records an event on the compute
// stream, makes the reduction stream wait for it and queues the bucket's all-reduce there, so
// the sum runs while the compute stream goes on with the earlier layers. wte is its own bucket,
// queued after the tied-embedding sum (finish_data_parallel_sum); then the compute stream waits
// for the reduction stream, so that the norm, AdamW and the next step's gradient memset come after
// every sum. Only with replicas (dp > 1): with one there is nothing to sum.
// With ZeRO-1 shards (model/optimizer_shards.h) a bucket's sum is a reduce-scatter instead: each
// part of it lands on the replica that owns it (comm/collectives.h's reduce_gradients_to_owners),
// and after the update gather_updated_parameters sends each owner's parameters to the others,
// bucket by bucket, on the compute stream at the end of the step.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "comm/collectives.h"
#include "comm/groups.h"

struct GradientBucket {
  size_t offset, count;  // elements of the stage's gradient allocation
  int chunk;             // the stage's chunk whose backward makes it final
  int layer;             // queued when the executor reports this layer final; -1: the chunk's whole backward
};

struct GradientBuckets {
  std::vector<GradientBucket> buckets;  // the layers' buckets, in the order the backward makes them final
  GradientBucket wte;                   // wte's, queued last (count 0 on a stage without it)
  cudaStream_t stream = nullptr;        // the reduction stream (nullptr: dp = 1, no buckets)
  std::vector<cudaEvent_t> ready;       // per bucket, then wte: its gradients final on the compute stream
  cudaEvent_t done = nullptr;           // the reduction stream's last sum
  // ZeRO-1: per bucket, then wte, its parts and their owners, cut once at set-up by the shards'
  // bounds (OptimizerShards::bounds); empty: all-reduce every bucket.
  std::vector<std::vector<OwnedRange>> owned;
  std::vector<int> queued;  // the step's buckets in the order queued (indices, wte's = buckets.size()); the caller
                            // clears it before the step
};

// With dp = 1, no stream and no buckets: there is nothing to sum. shard_bounds: ZeRO-1's, or empty.
GradientBuckets create_gradient_buckets(std::vector<GradientBucket> layer_buckets, GradientBucket wte,
                                        const CommGroups& groups, const std::vector<size_t>& shard_bounds = {});
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
// ZeRO-1, after the update (queued on compute): every bucket's parameters, then wte's, from their
// owners to the other replicas. Nothing without shards.
template <typename Element>
void gather_updated_parameters(const GradientBuckets& buckets, const CommGroups& groups, Element* parameters,
                               cudaStream_t compute);
