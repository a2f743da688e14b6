// The events a forward waits for before it reads parameters (model/parameters_pending.h).
#include "model/parameters_pending.h"

#include <algorithm>

#include "kernels/cuda_check.cuh"

namespace {

bool any_chunk(const ParameterLayout& layout, bool LayerRange::*part) {
  return std::any_of(layout.chunks.begin(), layout.chunks.end(), [part](const LayerRange& c) { return c.*part; });
}

// The slots that read a region (layer + 1; the tied wte: the embedding's and the head's).
std::vector<int> slots_reading(const ParameterRegion& region, const ParameterLayout& layout, int num_layers) {
  if (parameter_tensor_is_per_layer(region.tensor)) return {region.layer + 1};
  if (region.tensor == kWpe) return {0};
  if (region.tensor != kWte) return {num_layers + 1};  // lnfw, lnfb
  std::vector<int> slots;
  if (any_chunk(layout, &LayerRange::has_embedding)) slots.push_back(0);
  if (any_chunk(layout, &LayerRange::has_head)) slots.push_back(num_layers + 1);
  return slots;
}

}  // namespace

ParametersPending parameters_pending(const ParameterLayout& layout, const GradientBuckets& buckets, int num_layers) {
  ParametersPending pending{std::vector<cudaEvent_t>(num_layers + 2, nullptr)};
  if (buckets.gathered.empty()) return pending;
  std::vector<int> latest(num_layers + 2, -1);  // per slot, the latest position in gather_order it reads
  for (const ParameterRegion& region : layout.regions)
    for (size_t position = 0; position < buckets.gather_order.size(); ++position) {
      const int index = buckets.gather_order[position];
      const GradientBucket& bucket = index < int(buckets.buckets.size()) ? buckets.buckets[index] : buckets.wte;
      if (region.offset < bucket.offset || region.offset >= bucket.offset + bucket.count) continue;
      for (const int slot : slots_reading(region, layout, num_layers))
        latest[slot] = std::max(latest[slot], int(position));
    }
  for (int slot = 0; slot < num_layers + 2; ++slot)
    if (latest[slot] >= 0) pending.before[slot] = buckets.gathered[buckets.gather_order[latest[slot]]];
  return pending;
}

void wait_for_parameters(const ParametersPending* pending, int layer, cudaStream_t stream) {
  if (pending == nullptr || pending->before[layer + 1] == nullptr) return;
  CUDA_CHECK(cudaStreamWaitEvent(stream, pending->before[layer + 1], 0));
}
