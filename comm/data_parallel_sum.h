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
// bucket by bucket in the order the next forward reads them, on the reduction stream (which waits
// for the update): each bucket records `gathered`, which the next forward of its layers waits for
// (model/parameters_pending.h), so the later layers' broadcasts run under the earlier layers' forward.
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
  // ZeRO-1's all-gather: the buckets in the order the next forward reads them (indices, wte's =
  // buckets.size(): first on a stage with the embedding, last on one with the head only), and per
  // bucket, then wte, the event its broadcast records on the reduction stream.
  std::vector<int> gather_order;
  std::vector<cudaEvent_t> gathered;
  cudaEvent_t updated = nullptr;  // the update, on the compute stream: the broadcasts wait for it
  std::vector<int> queued;  // the step's buckets in the order queued (indices, wte's = buckets.size()); the caller
                            // clears it before the step
};

// With dp = 1, no stream and no buckets: there is nothing to sum. shard_bounds: ZeRO-1's, or empty.
// wte_first: the stage's forward reads wte first (it has the embedding).
GradientBuckets create_gradient_buckets(std::vector<GradientBucket> layer_buckets, GradientBucket wte,
                                        const CommGroups& groups, const std::vector<size_t>& shard_bounds = {},
                                        bool wte_first = false);
// Waits for the reduction stream first: its broadcasts may still be writing the parameters.
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
// ZeRO-1, after the update (queued on compute): every bucket's parameters from their owners to the
// other replicas, in gather_order, on the reduction stream, each recording its `gathered` event.
// The compute stream does not wait: the next forward waits per layer, and the next step's update
// after every sum (finish_data_parallel_sum), which the reduction stream runs after these. Nothing
// without shards.
template <typename Element>
void gather_updated_parameters(const GradientBuckets& buckets, const CommGroups& groups, Element* parameters,
                               cudaStream_t compute);
