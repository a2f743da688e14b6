// The norm table's slots (model/norm_slots.h).
#include "model/norm_slots.h"

#include <stdexcept>
#include <string>

#include "model/parameters.h"

static_assert(kFcprojb - kLn1w + 1 == kNormSlotsPerLayer, "a slot per per-layer tensor");
static_assert(kNumParameterTensors == kEmbeddingNormSlots + kNormSlotsPerLayer + kHeadNormSlots,
              "a slot per tensor outside the layers");

size_t norm_slot_count(int num_layers) {
  return kEmbeddingNormSlots + kNormSlotsPerLayer * size_t(num_layers) + kHeadNormSlots;
}

size_t norm_slot(int tensor, int layer, int num_layers) {
  using std::to_string;
  if (tensor < 0 || tensor >= kNumParameterTensors)
    throw std::runtime_error("norm_slot: tensor " + to_string(tensor) + " is not a parameter tensor");
  if (tensor == kWte || tensor == kWpe) return size_t(tensor - kWte);
  const size_t head = kEmbeddingNormSlots + kNormSlotsPerLayer * size_t(num_layers);
  if (tensor == kLnfw || tensor == kLnfb) return head + size_t(tensor - kLnfw);
  if (layer < 0 || layer >= num_layers)
    throw std::runtime_error("norm_slot: layer " + to_string(layer) + " is outside [0, " + to_string(num_layers) + ")");
  return kEmbeddingNormSlots + kNormSlotsPerLayer * size_t(layer) + size_t(tensor - kLn1w);
}

NormSlotRange norm_slots_of_stage(int num_layers, int first_layer, int end_layer, bool has_embedding, bool has_head) {
  const auto layer_start = [](int layer) { return kEmbeddingNormSlots + kNormSlotsPerLayer * size_t(layer); };
  return {has_embedding ? 0 : layer_start(first_layer),
          has_head ? norm_slot_count(num_layers) : layer_start(end_layer)};
}
