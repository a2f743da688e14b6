// A stage's buckets for the data-parallel sum (model/gradient_buckets.h).
#include "model/gradient_buckets.h"

#include <algorithm>

namespace {

// The region of a tensor outside the layers (wpe, lnfw), or nullptr.
const ParameterRegion* region_of(const ParameterLayout& layout, int tensor) {
  for (const ParameterRegion& r : layout.regions)
    if (r.tensor == tensor) return &r;
  return nullptr;
}

// Whether a chunk of the stage has the embedding (or the head).
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
      if (layers && wpe->offset + wpe->count == buckets[first].offset) {  // a chunk without layers has no first
        GradientBucket& first_layer = buckets[first];
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
