// Where each parameter tensor's squared sum goes in the table of the gradient norm, which
// comm/collectives.h's gather_layer_norm_partials brings together over the pipeline (its comment
// draws the table). The slots follow llm.c's order, so the norm is bitwise the same for every
// layout.
#pragma once
#include <cstddef>

#include "comm/collectives.h"

constexpr size_t kEmbeddingNormSlots = 2;
constexpr size_t kNormSlotsPerLayer = 12;
constexpr size_t kHeadNormSlots = 2;

// Slots of a model of num_layers layers: 12 L + 4.
size_t norm_slot_count(int num_layers);
// The slot of tensor (a ParameterTensor, model/parameters.h) at layer (ignored for the
// embeddings and the head). Throws std::runtime_error on a tensor or layer out of range.
size_t norm_slot(int tensor, int layer, int num_layers);

// The slots a stage fills: its embeddings, its layers, its head.
NormSlotRange norm_slots_of_stage(int num_layers, int first_layer, int end_layer, bool has_embedding, bool has_head);
