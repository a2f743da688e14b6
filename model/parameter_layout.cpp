// A stage's parameter allocation and its regions in llm.c's layout (model/parameter_layout.h).
#include "model/parameter_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

ParameterLayout parameter_layout(const GPTConfig& config, const std::vector<LayerRange>& chunks,
                                 TensorParallelRank shard) {
  if (config.padded_vocab_size % shard.tp != 0)
    throw std::invalid_argument("parameter layout: tp = " + std::to_string(shard.tp) +
                                " does not divide the padded vocabulary of " +
                                std::to_string(config.padded_vocab_size) + " rows");
  const std::array<size_t, kNumParameterTensors> sizes = shard_tensor_sizes(config, shard);
  const std::array<size_t, kNumParameterTensors> full_sizes = parameter_tensor_sizes(config);
  std::array<size_t, kNumParameterTensors> full = parameter_tensor_offsets(config);
  full[kWte] += shard.rank * sizes[kWte];  // the rank's rows, consecutive in (Vp, C)
  const int L = config.num_layers;
  bool has_embedding = false, has_head = false;
  for (const LayerRange& range : chunks) {
    has_embedding = has_embedding || range.has_embedding;
    has_head = has_head || range.has_head;
  }
  size_t per_layer = 0;
  for (int tensor = kLn1w; tensor <= kFcprojb; ++tensor) per_layer += sizes[tensor] / L;
  ParameterLayout layout{chunks, {}, {}, 0, num_parameters(config), per_layer, shard};
  const auto place = [&](size_t count) {
    const size_t at = layout.size;
    layout.size += count;
    return at;
  };
  // The tensors outside the layers, each at most once per stage, around the chunks' blocks.
  std::array<size_t, kNumParameterTensors> whole;
  whole.fill(kNotHeld);
  if (has_embedding || has_head) whole[kWte] = place(sizes[kWte]);
  if (has_embedding) whole[kWpe] = place(sizes[kWpe]);
  for (const LayerRange& range : chunks) {
    std::array<size_t, kNumParameterTensors> offsets;
    offsets.fill(kNotHeld);
    const size_t block = place((range.end_layer - range.first_layer) * per_layer);
    if (range.end_layer > range.first_layer)
      for (int i = kLn1w, at = 0; i <= kFcprojb; at += int(sizes[i] / L), ++i) offsets[i] = block + at;
    layout.chunk_offsets.push_back(offsets);
  }
  if (has_head) {
    whole[kLnfw] = place(sizes[kLnfw]);
    whole[kLnfb] = place(sizes[kLnfb]);
  }

  const auto whole_region = [&](int tensor, bool tied_copy) {
    layout.regions.push_back({tensor, 0, whole[tensor], full[tensor], sizes[tensor], tied_copy});
  };
  for (size_t c = 0; c < chunks.size(); ++c) {
    const LayerRange& range = chunks[c];
    std::array<size_t, kNumParameterTensors>& offsets = layout.chunk_offsets[c];
    if (range.has_embedding || range.has_head) offsets[kWte] = whole[kWte];
    if (range.has_embedding) {
      offsets[kWpe] = whole[kWpe];
      whole_region(kWte, false);
      whole_region(kWpe, false);
    }
    for (int layer = range.first_layer; layer < range.end_layer; ++layer)
      for (int tensor = kLn1w; tensor <= kFcprojb; ++tensor) {
        layout.regions.push_back({tensor, layer, offsets[tensor] + (layer - range.first_layer) * per_layer,
                                  full[tensor] + layer * (full_sizes[tensor] / L), sizes[tensor] / L, false,
                                  tensor_cut(config, shard, tensor)});
      }
    if (range.has_head) {
      offsets[kLnfw] = whole[kLnfw];
      offsets[kLnfb] = whole[kLnfb];
      if (!has_embedding) whole_region(kWte, true);
      whole_region(kLnfw, false);
      whole_region(kLnfb, false);
    }
  }
  return layout;
}

size_t tied_copy_count(const ParameterLayout& layout) {
  size_t count = 0;
  for (const ParameterRegion& r : layout.regions) count += r.tied_copy ? r.count : 0;
  return count;
}

template <typename Value>
std::vector<Value> to_stage_layout(const ParameterLayout& layout, const std::vector<Value>& full) {
  if (full.size() != layout.full_size)
    throw std::runtime_error("to_stage_layout: " + std::to_string(full.size()) + " values for a model of " +
                             std::to_string(layout.full_size));
  std::vector<Value> stage(layout.size);
  for (const ParameterRegion& r : layout.regions) {
    if (r.cut)
      cut_linear_slice<Value>(*r.cut, stage.data() + r.offset, nullptr, full.data() + r.full_offset, nullptr);
    else
      std::copy(full.begin() + r.full_offset, full.begin() + r.full_offset + r.count, stage.begin() + r.offset);
  }
  return stage;
}

template <typename Value>
void place_in_full_layout(const ParameterLayout& layout, const std::vector<Value>& stage, std::vector<Value>& full) {
  if (stage.size() != layout.size || full.size() != layout.full_size)
    throw std::runtime_error("place_in_full_layout: " + std::to_string(stage.size()) + " values for a stage of " +
                             std::to_string(layout.size) + ", " + std::to_string(full.size()) +
                             " for a model of " + std::to_string(layout.full_size));
  for (const ParameterRegion& r : layout.regions) {
    if (r.cut)
      place_linear_slice<Value>(*r.cut, full.data() + r.full_offset, nullptr, stage.data() + r.offset, nullptr);
    else
      std::copy(stage.begin() + r.offset, stage.begin() + r.offset + r.count, full.begin() + r.full_offset);
  }
}

template <typename Value>
std::vector<Value> to_full_layout(const ParameterLayout& layout, const std::vector<Value>& stage) {
  std::vector<Value> full(layout.full_size, Value(0));
  place_in_full_layout(layout, stage, full);
  return full;
}

#define INSTANTIATE_LAYOUT_COPIES(Value)                                                                        \
  template std::vector<Value> to_stage_layout<Value>(const ParameterLayout&, const std::vector<Value>&);       \
  template void place_in_full_layout<Value>(const ParameterLayout&, const std::vector<Value>&, std::vector<Value>&); \
  template std::vector<Value> to_full_layout<Value>(const ParameterLayout&, const std::vector<Value>&);
INSTANTIATE_LAYOUT_COPIES(float)
INSTANTIATE_LAYOUT_COPIES(double)
