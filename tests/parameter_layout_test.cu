// A pipeline stage's parameter layout (model/parameter_layout.h): a stage's allocation holds
// exactly its regions, packed, each layer's twelve tensors together (layer-major); each region's full offset is its place in llm.c's layout; wte once per stage, a
// tied copy only on a stage with the head but not the embedding; chunk views (through
// layer_views) point at their layers' regions; values round-trip through the stage layout. Host
// code only.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"
#include "model/parameters.h"

namespace {

// L=4, NH=2, C=8, maxT=5, V=11 (Vp=128).
const GPTConfig kConfig = make_gpt_config(4, 2, 8, 5, 11);

size_t size_of(int tensor) { return parameter_tensor_sizes(kConfig)[tensor]; }
size_t per_layer(int tensor) { return size_of(tensor) / kConfig.num_layers; }

size_t count_of(const ParameterLayout& layout, int tensor) {
  return std::count_if(layout.regions.begin(), layout.regions.end(),
                       [&](const ParameterRegion& r) { return r.tensor == tensor; });
}

// The regions tile [0, size) of the stage allocation: sorted by offset, each starts where the
// previous ends; and in their own order, each layer's twelve (consecutive in the list) are one
// range, layer-major.
void expect_packed(const ParameterLayout& layout) {
  for (size_t i = 1; i < layout.regions.size(); ++i) {
    const ParameterRegion &a = layout.regions[i - 1], &b = layout.regions[i];
    if (parameter_tensor_is_per_layer(a.tensor) && b.tensor == a.tensor + 1) {
      EXPECT_EQ(b.offset, a.offset + a.count) << parameter_tensor_name(b.tensor) << " layer " << b.layer;
    }
  }
  std::vector<ParameterRegion> regions = layout.regions;
  std::sort(regions.begin(), regions.end(),
            [](const ParameterRegion& a, const ParameterRegion& b) { return a.offset < b.offset; });
  size_t at = 0;
  for (const ParameterRegion& r : regions) {
    EXPECT_EQ(r.offset, at) << parameter_tensor_name(r.tensor) << " layer " << r.layer;
    at = r.offset + r.count;
  }
  EXPECT_EQ(at, layout.size);
}

// Each region's full offset is its tensor's (and layer's) place in llm.c's layout.
void expect_full_offsets(const ParameterLayout& layout) {
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kConfig);
  for (const ParameterRegion& r : layout.regions) {
    const bool sliced = parameter_tensor_is_per_layer(r.tensor);
    EXPECT_EQ(r.full_offset, offsets[r.tensor] + (sliced ? r.layer * per_layer(r.tensor) : 0));
    EXPECT_EQ(r.count, sliced ? per_layer(r.tensor) : size_of(r.tensor));
  }
}

// Layer l's slice of per-layer tensor i through layer_views.
template <typename T>
T* layer_slice(const ParameterTensors<T>& views, int tensor, int layer) {
  const LayerParameters<T> p = layer_views(views, kConfig, layer);
  const std::array<T*, 12> slices = {p.ln1w, p.ln1b, p.qkvw, p.qkvb, p.attprojw, p.attprojb,
                                     p.ln2w, p.ln2b, p.fcw,  p.fcb,  p.fcprojw,  p.fcprojb};
  return slices[tensor - kLn1w];
}

// Every region is where the chunk views (and layer_views of them) point.
void expect_views_at_regions(const ParameterLayout& layout) {
  std::vector<float> memory(layout.size);
  const std::vector<ParameterTensors<float>> views = stage_views(memory.data(), layout);
  for (const ParameterRegion& r : layout.regions) {
    const float* at = memory.data() + r.offset;
    if (!parameter_tensor_is_per_layer(r.tensor)) {
      for (const ParameterTensors<float>& chunk : views) {
        if (tensor_view(chunk, r.tensor) != nullptr) {
          EXPECT_EQ(tensor_view(chunk, r.tensor), at) << parameter_tensor_name(r.tensor);
        }
      }
      continue;
    }
    int held = 0;
    for (size_t c = 0; c < views.size(); ++c)
      if (r.layer >= layout.chunks[c].first_layer && r.layer < layout.chunks[c].end_layer) {
        EXPECT_EQ(layer_slice(views[c], r.tensor, r.layer), at) << parameter_tensor_name(r.tensor) << " " << r.layer;
        ++held;
      }
    EXPECT_EQ(held, 1) << parameter_tensor_name(r.tensor) << " layer " << r.layer;
  }
}

}  // namespace

// One chunk of the whole model: wte and wpe where llm.c has them, then layer by layer (layer l's
// twelve tensors at wte + wpe + l x parameters_per_layer), then lnfw and lnfb at llm.c's place.
TEST(ParameterLayout, WholeModelIsLayerMajor) {
  const ParameterLayout layout = parameter_layout(kConfig, {whole_model(kConfig)});
  EXPECT_EQ(layout.size, num_parameters(kConfig));
  EXPECT_EQ(layout.full_size, num_parameters(kConfig));
  EXPECT_EQ(layout.layer_stride, parameters_per_layer(kConfig));
  const size_t blocks = size_of(kWte) + size_of(kWpe);
  for (const ParameterRegion& r : layout.regions) {
    EXPECT_FALSE(r.tied_copy);
    if (!parameter_tensor_is_per_layer(r.tensor)) {
      EXPECT_EQ(r.offset, r.full_offset) << parameter_tensor_name(r.tensor);
    } else {
      EXPECT_GE(r.offset, blocks + r.layer * layout.layer_stride);
      EXPECT_LT(r.offset, blocks + (r.layer + 1) * layout.layer_stride);
    }
  }
  expect_packed(layout);
  expect_full_offsets(layout);
  expect_views_at_regions(layout);
  std::vector<float> memory(layout.size);
  const ParameterTensors<float> chunk = chunk_views(memory.data(), layout, 0);
  EXPECT_EQ(chunk.first_layer, 0);
  EXPECT_EQ(layer_views(chunk, kConfig, 1).ln1w, memory.data() + blocks + layout.layer_stride);
}

// llm.c's layout itself (point_views, layer_stride 0): layer_views slice each tensor.
TEST(ParameterLayout, PointViewsSliceEachTensor) {
  std::vector<float> memory(num_parameters(kConfig));
  const ParameterTensors<float> full = point_views(memory.data(), kConfig);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kConfig);
  for (int tensor = kLn1w; tensor <= kFcprojb; ++tensor)
    for (int l = 0; l < kConfig.num_layers; ++l)
      EXPECT_EQ(layer_slice(full, tensor, l), memory.data() + offsets[tensor] + l * per_layer(tensor));
}

// Regions in norm-slot order: wte, wpe, layer 0's twelve tensors, ..., lnfw, lnfb.
TEST(ParameterLayout, RegionsAreInNormSlotOrder) {
  const ParameterLayout layout = parameter_layout(kConfig, {whole_model(kConfig)});
  ASSERT_EQ(layout.regions.size(), size_t(2 + 12 * kConfig.num_layers + 2));
  EXPECT_EQ(layout.regions[0].tensor, kWte);
  EXPECT_EQ(layout.regions[1].tensor, kWpe);
  for (int l = 0; l < kConfig.num_layers; ++l)
    for (int k = 0; k < 12; ++k) {
      EXPECT_EQ(layout.regions[2 + 12 * l + k].tensor, kLn1w + k);
      EXPECT_EQ(layout.regions[2 + 12 * l + k].layer, l);
    }
  EXPECT_EQ(layout.regions[2 + 12 * kConfig.num_layers].tensor, kLnfw);
  EXPECT_EQ(layout.regions.back().tensor, kLnfb);
}

// Four stages of one layer each: the first holds wte, wpe and its layer, the middle ones only
// their layers, the last its layer, a tied copy of wte and lnf; together the whole model once,
// plus the tied copy.
TEST(ParameterLayout, FourStagesHoldOnlyTheirTensors) {
  const size_t layer = parameters_per_layer(kConfig), C = kConfig.channels;
  const std::vector<ParameterLayout> stages = {parameter_layout(kConfig, {{0, 1, true, false}}),
                                               parameter_layout(kConfig, {{1, 2, false, false}}),
                                               parameter_layout(kConfig, {{2, 3, false, false}}),
                                               parameter_layout(kConfig, {{3, 4, false, true}})};
  EXPECT_EQ(stages[0].size, size_of(kWte) + size_of(kWpe) + layer);
  EXPECT_EQ(stages[1].size, layer);
  EXPECT_EQ(stages[2].size, layer);
  EXPECT_EQ(stages[3].size, size_of(kWte) + layer + 2 * C);
  std::vector<int> covered(num_parameters(kConfig), 0);
  for (const ParameterLayout& stage : stages) {
    expect_packed(stage);
    expect_full_offsets(stage);
    expect_views_at_regions(stage);
    for (const ParameterRegion& r : stage.regions)
      if (!r.tied_copy)
        for (size_t i = 0; i < r.count; ++i) ++covered[r.full_offset + i];
  }
  EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(count_of(stages[0], kWte), 1);
  EXPECT_FALSE(stages[0].regions.front().tied_copy);
  EXPECT_EQ(count_of(stages[1], kWte), 0);
  std::vector<float> middle(stages[1].size);
  EXPECT_EQ(chunk_views(middle.data(), stages[1], 0).wte, nullptr);
  ASSERT_EQ(count_of(stages[3], kWte), 1);
  for (const ParameterRegion& r : stages[3].regions) EXPECT_EQ(r.tied_copy, r.tensor == kWte);
}

// The tied copy's elements (tied_copy_count) are wte's, Vp C, on a stage with the head but not the
// embedding, and a tp rank's Vp / tp rows there; the embedding's stage, a middle one and a stage
// with both hold none.
TEST(ParameterLayout, TiedCopyCountIsWteOnTheHeadsStageOnly) {
  const size_t wte = size_t(kConfig.padded_vocab_size) * kConfig.channels;
  EXPECT_EQ(tied_copy_count(parameter_layout(kConfig, {{3, 4, false, true}})), wte);
  EXPECT_EQ(tied_copy_count(parameter_layout(kConfig, {{3, 4, false, true}}, {2, 1})), wte / 2);
  EXPECT_EQ(tied_copy_count(parameter_layout(kConfig, {{0, 1, true, false}})), 0u);
  EXPECT_EQ(tied_copy_count(parameter_layout(kConfig, {{1, 2, false, false}})), 0u);
  EXPECT_EQ(tied_copy_count(parameter_layout(kConfig, {{0, 2, true, false}, {2, 4, false, true}})), 0u);
}

// One stage with both uses (interleaved chunks on a single stage): wte once, not a tied copy,
// and each chunk holds its own layers only, one after the other.
TEST(ParameterLayout, ChunksOfOneStageShareWteAndSliceTheirLayers) {
  const ParameterLayout layout = parameter_layout(kConfig, {{0, 2, true, false}, {2, 4, false, true}});
  EXPECT_EQ(layout.size, num_parameters(kConfig));
  EXPECT_EQ(count_of(layout, kWte), 1);
  for (const ParameterRegion& r : layout.regions) EXPECT_FALSE(r.tied_copy);
  expect_packed(layout);
  expect_full_offsets(layout);
  expect_views_at_regions(layout);

  std::vector<float> memory(layout.size);
  const std::vector<ParameterTensors<float>> views = stage_views(memory.data(), layout);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].wte, views[1].wte);
  EXPECT_EQ(views[1].wpe, nullptr);
  EXPECT_EQ(views[0].lnfw, nullptr);
  EXPECT_EQ(views[1].first_layer, 2);
  // Within a layer the tensors follow each other: qkvw of chunk 0's first layer ends where its
  // qkvb begins; chunk 1's first layer follows chunk 0's two.
  EXPECT_EQ(views[0].qkvw + per_layer(kQkvw), views[0].qkvb);
  EXPECT_EQ(views[1].ln1w, views[0].ln1w + 2 * parameters_per_layer(kConfig));
  // Layer 3 is the second layer of chunk 1, at the region's offset.
  const LayerParameters<float> layer3 = layer_views(views[1], kConfig, 3);
  EXPECT_EQ(layer3.qkvw, views[1].qkvw + parameters_per_layer(kConfig));
  const auto fcw3 = std::find_if(layout.regions.begin(), layout.regions.end(),
                                 [](const ParameterRegion& r) { return r.tensor == kFcw && r.layer == 3; });
  ASSERT_NE(fcw3, layout.regions.end());
  EXPECT_EQ(layer3.fcw, memory.data() + fcw3->offset);
}

// A middle stage of interleaved chunks: two blocks of layers, no wte.
TEST(ParameterLayout, MiddleStageHasNoEmbeddings) {
  const ParameterLayout layout = parameter_layout(kConfig, {{1, 2, false, false}, {3, 4, false, false}});
  EXPECT_EQ(layout.size, 2 * parameters_per_layer(kConfig));
  EXPECT_EQ(count_of(layout, kWte), 0);
  expect_packed(layout);
  expect_full_offsets(layout);
  expect_views_at_regions(layout);
}

// To the stage layout and back: the stage's regions keep their values, the rest is zero; the
// whole model round-trips unchanged.
TEST(ParameterLayout, ValuesRoundTripThroughTheStageLayout) {
  std::vector<float> full(num_parameters(kConfig));
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(i + 1);
  const ParameterLayout whole = parameter_layout(kConfig, {whole_model(kConfig)});
  EXPECT_EQ(to_full_layout(whole, to_stage_layout(whole, full)), full);

  const ParameterLayout last = parameter_layout(kConfig, {{3, 4, false, true}});
  const std::vector<float> stage = to_stage_layout(last, full);
  ASSERT_EQ(stage.size(), last.size);
  const std::vector<float> back = to_full_layout(last, stage);
  std::vector<bool> held(full.size(), false);
  for (const ParameterRegion& r : last.regions)
    std::fill(held.begin() + r.full_offset, held.begin() + r.full_offset + r.count, true);
  for (size_t i = 0; i < full.size(); ++i) ASSERT_EQ(back[i], held[i] ? full[i] : 0.0f) << i;
  EXPECT_THROW(to_stage_layout(last, stage), std::runtime_error);
  EXPECT_THROW(to_full_layout(last, full), std::runtime_error);
}
