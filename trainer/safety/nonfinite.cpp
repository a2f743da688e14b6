// Where a non-finite gradient is, from the norm-partials table (trainer/safety/nonfinite.h).
#include "trainer/safety/nonfinite.h"

#include <cmath>

#include "comm/collectives.h"
#include "model/norm_slots.h"
#include "model/parameters.h"

namespace {

struct TensorSlice {
  int tensor;
  int layer;  // -1 for the tensors outside the layers
};

// The inverse of comm/collectives.h's norm_slot.
TensorSlice slice_of_slot(size_t slot, int num_layers) {
  const size_t head = kEmbeddingNormSlots + kNormSlotsPerLayer * size_t(num_layers);
  if (slot < kEmbeddingNormSlots) return {int(kWte + slot), -1};
  if (slot >= head) return {int(kLnfw + (slot - head)), -1};
  const size_t within = slot - kEmbeddingNormSlots;
  return {int(kLn1w + within % kNormSlotsPerLayer), int(within / kNormSlotsPerLayer)};
}

int stage_holding(const TensorSlice& slice, const std::vector<LayerRange>& virtual_stages, const Placement& placement) {
  for (size_t i = 0; i < virtual_stages.size(); ++i) {
    const LayerRange& range = virtual_stages[i];
    const bool holds = slice.layer >= 0 ? slice.layer >= range.first_layer && slice.layer < range.end_layer
                       : slice.tensor == kWte || slice.tensor == kWpe ? range.has_embedding
                                                                      : range.has_head;
    if (holds) return placement.stage_of(int(i));
  }
  return -1;
}

}  // namespace

std::string first_nonfinite_gradient(const std::vector<float>& partials, const GPTConfig& config,
                                     const std::vector<LayerRange>& virtual_stages, const Placement& placement) {
  for (size_t slot = 0; slot < partials.size(); ++slot) {
    if (std::isfinite(partials[slot])) continue;
    const TensorSlice slice = slice_of_slot(slot, config.num_layers);
    std::string text = "first in stage " + std::to_string(stage_holding(slice, virtual_stages, placement)) + ", tensor " +
                       parameter_tensor_name(slice.tensor);
    if (slice.layer >= 0) text += " layer " + std::to_string(slice.layer);
    return text;
  }
  return "";
}

std::string skipped_step_reason(double norm, const std::string& first_nonfinite) {
  if (std::isfinite(norm)) return "non-finite loss";
  if (first_nonfinite.empty())
    return "non-finite gradient norm (every tensor's squared sum is finite; their total overflows)";
  return "non-finite gradient (" + first_nonfinite + ")";
}
