// A pipeline stage's parameter layout (model/parameter_layout.h): the whole model is llm.c's
// layout; a stage's allocation holds exactly its regions, packed; each region's full offset is
// its place in llm.c's layout; wte once per stage, a tied copy only on a stage with the head
// but not the embedding; chunk views slice their own layers; values round-trip through the
// stage layout. Host code only.
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
// previous ends.
void expect_packed(const ParameterLayout& layout) {
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

}  // namespace

TEST(ParameterLayout, WholeModelIsLlmcLayout) {
  const ParameterLayout layout = parameter_layout(kConfig, {whole_model(kConfig)});
  EXPECT_EQ(layout.size, num_parameters(kConfig));
  EXPECT_EQ(layout.full_size, num_parameters(kConfig));
  for (const ParameterRegion& r : layout.regions) {
    EXPECT_EQ(r.offset, r.full_offset) << parameter_tensor_name(r.tensor) << " layer " << r.layer;
    EXPECT_FALSE(r.tied_copy);
  }
  expect_packed(layout);
  std::vector<float> memory(layout.size);
  const ParameterTensors<float> chunk = chunk_views(memory.data(), layout, 0);
  const ParameterTensors<float> full = point_views(memory.data(), kConfig);
  for (int i = 0; i < kNumParameterTensors; ++i) EXPECT_EQ(tensor_view(chunk, i), tensor_view(full, i)) << i;
  EXPECT_EQ(chunk.first_layer, 0);
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

// One stage with both uses (interleaved chunks on a single stage): wte once, not a tied copy,
// and each chunk's per-layer tensors hold its own layers only.
TEST(ParameterLayout, ChunksOfOneStageShareWteAndSliceTheirLayers) {
  const ParameterLayout layout = parameter_layout(kConfig, {{0, 2, true, false}, {2, 4, false, true}});
  EXPECT_EQ(layout.size, num_parameters(kConfig));
  EXPECT_EQ(count_of(layout, kWte), 1);
  for (const ParameterRegion& r : layout.regions) EXPECT_FALSE(r.tied_copy);
  expect_packed(layout);
  expect_full_offsets(layout);

  std::vector<float> memory(layout.size);
  const std::vector<ParameterTensors<float>> views = stage_views(memory.data(), layout);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].wte, views[1].wte);
  EXPECT_EQ(views[1].wpe, nullptr);
  EXPECT_EQ(views[0].lnfw, nullptr);
  EXPECT_EQ(views[1].first_layer, 2);
  // Chunk 0's per-layer tensors are two layers long: qkvw of chunk 0 ends where qkvb begins.
  EXPECT_EQ(views[0].qkvw + 2 * per_layer(kQkvw), views[0].qkvb);
  // Layer 3 is the second slice of chunk 1's tensors, at the region's offset.
  const LayerParameters<float> layer3 = layer_views(views[1], kConfig, 3);
  EXPECT_EQ(layer3.qkvw, views[1].qkvw + per_layer(kQkvw));
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
