// The data-parallel sum in buckets on a reduction stream (comm/data_parallel_sum.h).
#include "comm/data_parallel_sum.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/collectives.h"
#include "comm/nccl_types.h"
#include "kernels/cuda_check.cuh"

namespace {

// The parts of bucket that each replica owns (shard_bounds: dp + 1 cuts), in offset order.
std::vector<OwnedRange> owned_ranges(const GradientBucket& bucket, const std::vector<size_t>& shard_bounds) {
  std::vector<OwnedRange> ranges;
  const size_t end = bucket.offset + bucket.count;
  for (size_t r = 0; r + 1 < shard_bounds.size(); ++r) {
    const size_t first = std::max(bucket.offset, shard_bounds[r]), last = std::min(end, shard_bounds[r + 1]);
    if (first < last) ranges.push_back({first, last - first, int(r)});
  }
  return ranges;
}

template <typename Element>
void queue_bucket(GradientBuckets& buckets, const CommGroups& groups, Element* gradients, int index,
                  cudaStream_t compute) {
  const GradientBucket& bucket = index < int(buckets.buckets.size()) ? buckets.buckets[index] : buckets.wte;
  CUDA_CHECK(cudaEventRecord(buckets.ready[index], compute));
  CUDA_CHECK(cudaStreamWaitEvent(buckets.stream, buckets.ready[index], 0));
  if (buckets.owned.empty())
    allreduce_data_parallel_gradients(groups, gradients + bucket.offset, bucket.count, nccl_data_type<Element>(),
                                      buckets.stream);
  else
    reduce_gradients_to_owners(groups, gradients, buckets.owned[index], nccl_data_type<Element>(), buckets.stream);
  buckets.queued.push_back(index);
}

}  // namespace

GradientBuckets create_gradient_buckets(std::vector<GradientBucket> layer_buckets, GradientBucket wte,
                                        const CommGroups& groups, const std::vector<size_t>& shard_bounds,
                                        bool wte_first) {
  GradientBuckets buckets;
  if (groups.mesh.dp == 1) return buckets;
  buckets.buckets = std::move(layer_buckets);
  buckets.wte = wte;
  if (!shard_bounds.empty()) {
    for (const GradientBucket& bucket : buckets.buckets) buckets.owned.push_back(owned_ranges(bucket, shard_bounds));
    buckets.owned.push_back(owned_ranges(buckets.wte, shard_bounds));
    const int n = int(buckets.buckets.size());
    if (wte_first && wte.count > 0) buckets.gather_order.push_back(n);
    for (int i = 0; i < n; ++i) buckets.gather_order.push_back(i);
    if (!wte_first && wte.count > 0) buckets.gather_order.push_back(n);
    buckets.gathered.resize(n + 1);
  }
  CUDA_CHECK(cudaStreamCreate(&buckets.stream));
  buckets.ready.resize(buckets.buckets.size() + 1);
  for (cudaEvent_t& event : buckets.ready) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  for (cudaEvent_t& event : buckets.gathered) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&buckets.done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&buckets.updated, cudaEventDisableTiming));
  return buckets;
}

void destroy_gradient_buckets(GradientBuckets& buckets) {
  if (buckets.stream == nullptr) return;
  CUDA_CHECK(cudaStreamSynchronize(buckets.stream));
  for (cudaEvent_t event : buckets.ready) CUDA_CHECK(cudaEventDestroy(event));
  for (cudaEvent_t event : buckets.gathered) CUDA_CHECK(cudaEventDestroy(event));
  CUDA_CHECK(cudaEventDestroy(buckets.done));
  CUDA_CHECK(cudaEventDestroy(buckets.updated));
  CUDA_CHECK(cudaStreamDestroy(buckets.stream));
  buckets = GradientBuckets{};
}

template <typename Element>
void queue_final_buckets(GradientBuckets& buckets, const CommGroups& groups, Element* gradients, int chunk, int layer,
                         cudaStream_t compute) {
  for (size_t i = 0; i < buckets.buckets.size(); ++i)
    if (buckets.buckets[i].chunk == chunk && buckets.buckets[i].layer == layer)
      queue_bucket(buckets, groups, gradients, int(i), compute);
}

template <typename Element>
void finish_data_parallel_sum(GradientBuckets& buckets, const CommGroups& groups, Element* gradients,
                              cudaStream_t compute) {
  if (buckets.stream == nullptr) return;
  const int n = int(buckets.buckets.size());
  for (int i = 0; i < n; ++i)
    if (std::count(buckets.queued.begin(), buckets.queued.end(), i) != 1)
      throw std::runtime_error("data-parallel sum: gradient bucket " + std::to_string(i) + " (chunk " +
                               std::to_string(buckets.buckets[i].chunk) + ", layer " +
                               std::to_string(buckets.buckets[i].layer) + ") was not queued once in the step");
  if (buckets.wte.count > 0) queue_bucket(buckets, groups, gradients, n, compute);
  CUDA_CHECK(cudaEventRecord(buckets.done, buckets.stream));
  CUDA_CHECK(cudaStreamWaitEvent(compute, buckets.done, 0));
}

template <typename Element>
void gather_updated_parameters(const GradientBuckets& buckets, const CommGroups& groups, Element* parameters,
                               cudaStream_t compute) {
  if (buckets.owned.empty()) return;
  CUDA_CHECK(cudaEventRecord(buckets.updated, compute));
  CUDA_CHECK(cudaStreamWaitEvent(buckets.stream, buckets.updated, 0));
  for (const int index : buckets.gather_order) {
    broadcast_parameters_from_owners(groups, parameters, buckets.owned[index], nccl_data_type<Element>(),
                                     buckets.stream);
    CUDA_CHECK(cudaEventRecord(buckets.gathered[index], buckets.stream));
  }
}

#define INSTANTIATE_GRADIENT_BUCKETS(Element)                                                                      \
  template void queue_final_buckets<Element>(GradientBuckets&, const CommGroups&, Element*, int, int, cudaStream_t); \
  template void finish_data_parallel_sum<Element>(GradientBuckets&, const CommGroups&, Element*, cudaStream_t); \
  template void gather_updated_parameters<Element>(const GradientBuckets&, const CommGroups&, Element*, cudaStream_t);

INSTANTIATE_GRADIENT_BUCKETS(float)
INSTANTIATE_GRADIENT_BUCKETS(__nv_bfloat16)
