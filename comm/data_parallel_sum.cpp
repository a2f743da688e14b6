// The data-parallel sum in buckets on a reduction stream (trainer/gradient_buckets.h).
#include "trainer/gradient_buckets.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "comm/collectives.h"
#include "comm/nccl_types.h"
#include "kernels/cuda_check.cuh"

namespace {

// The region of a tensor outside the layers (wpe, lnfw), or nullptr.
const ParameterRegion* region_of(const ParameterLayout& layout, int tensor) {
  for (const ParameterRegion& r : layout.regions)
    if (r.tensor == tensor) return &r;
  return nullptr;
}

template <typename Element>
void queue_bucket(GradientBuckets& buckets, const CommGroups& groups, Element* gradients, int index,
                  cudaStream_t compute) {
  const GradientBucket& bucket = index < int(buckets.buckets.size()) ? buckets.buckets[index] : buckets.wte;
  CUDA_CHECK(cudaEventRecord(buckets.ready[index], compute));
  CUDA_CHECK(cudaStreamWaitEvent(buckets.stream, buckets.ready[index], 0));
  allreduce_data_parallel_gradients(groups, gradients + bucket.offset, bucket.count, nccl_data_type<Element>(),
                                    buckets.stream);
  buckets.queued.push_back(index);
}

}  // namespace

std::vector<GradientBucket> gradient_buckets(const ParameterLayout& layout) {
  std::vector<GradientBucket> buckets;
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const LayerRange& range = layout.chunks[c];
    const size_t first = buckets.size();
    for (int l = range.first_layer; l < range.end_layer; ++l)
      buckets.push_back({layout.chunk_offsets[c][kLn1w] + (l - range.first_layer) * layout.layer_stride,
                         layout.layer_stride, int(c), l});
    const bool layers = buckets.size() > first;
    // lnfw and lnfb are final before the chunk's last layer (the head's backward comes first):
    // they join its bucket when they follow it, else they wait for the chunk's whole backward.
    if (range.has_head) {
      const ParameterRegion* lnfw = region_of(layout, kLnfw);
      const size_t count = 2 * lnfw->count;
      if (layers && buckets.back().offset + buckets.back().count == lnfw->offset)
        buckets.back().count += count;
      else
        buckets.push_back({lnfw->offset, count, int(c), -1});
    }
    // wpe is final after the chunk's first layer (the embedding's backward comes last): it joins
    // that layer's bucket when it precedes it, which then waits for the chunk's whole backward.
    if (range.has_embedding) {
      const ParameterRegion* wpe = region_of(layout, kWpe);
      GradientBucket& first_layer = buckets[first];
      if (layers && wpe->offset + wpe->count == first_layer.offset) {
        first_layer.offset = wpe->offset;
        first_layer.count += wpe->count;
        first_layer.layer = -1;
      } else {
        buckets.push_back({wpe->offset, wpe->count, int(c), -1});
      }
    }
  }
  return buckets;
}

GradientBucket wte_bucket(const ParameterLayout& layout) {
  const ParameterRegion* wte = region_of(layout, kWte);
  return wte ? GradientBucket{wte->offset, wte->count, -1, -1} : GradientBucket{0, 0, -1, -1};
}

GradientBuckets create_gradient_buckets(const ParameterLayout& layout, const CommGroups& groups) {
  GradientBuckets buckets;
  if (groups.mesh.dp == 1) return buckets;
  buckets.buckets = gradient_buckets(layout);
  buckets.wte = wte_bucket(layout);
  CUDA_CHECK(cudaStreamCreate(&buckets.stream));
  buckets.ready.resize(buckets.buckets.size() + 1);
  for (cudaEvent_t& event : buckets.ready) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&buckets.done, cudaEventDisableTiming));
  return buckets;
}

void destroy_gradient_buckets(GradientBuckets& buckets) {
  if (buckets.stream == nullptr) return;
  for (cudaEvent_t event : buckets.ready) CUDA_CHECK(cudaEventDestroy(event));
  CUDA_CHECK(cudaEventDestroy(buckets.done));
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

#define INSTANTIATE_GRADIENT_BUCKETS(Element)                                                                      \
  template void queue_final_buckets<Element>(GradientBuckets&, const CommGroups&, Element*, int, int, cudaStream_t); \
  template void finish_data_parallel_sum<Element>(GradientBuckets&, const CommGroups&, Element*, cudaStream_t);

INSTANTIATE_GRADIENT_BUCKETS(float)
INSTANTIATE_GRADIENT_BUCKETS(__nv_bfloat16)
