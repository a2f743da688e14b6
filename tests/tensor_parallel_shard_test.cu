// A tensor-parallel rank's parameter layout (model/tensor_parallel_shard.h, parameter_layout with
// a TensorParallelRank): each sharded element of llm.c's layout is held by exactly one tp rank and
// each replicated one by all, every rank's stage placed back rebuilds the whole model (also cut
// into pipeline stages), and a rank holds its own heads' rows, its input columns and its
// vocabulary rows. Host code only.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"
#include "model/parameters.h"
#include "model/tensor_parallel_shard.h"

namespace {

// L=2, NH=4, C=8, maxT=5, V=11 (Vp=128): tp 2 and 4 divide the heads, 4 C and Vp.
const GPTConfig kConfig = make_gpt_config(2, 4, 8, 5, 11);
constexpr int kTensorParallelSizes[] = {2, 4};

// Element i of the whole model holds i (exact in float below 2^24).
std::vector<float> numbered_model() {
  std::vector<float> full(num_parameters(kConfig));
  for (size_t i = 0; i < full.size(); ++i) full[i] = float(i);
  return full;
}

bool is_replicated(int tensor) {
  return tensor == kWpe || tensor == kLn1w || tensor == kLn1b || tensor == kAttprojb || tensor == kLn2w ||
         tensor == kLn2b || tensor == kFcprojb || tensor == kLnfw || tensor == kLnfb;
}

// The tensor that element `index` of llm.c's layout belongs to.
int tensor_at(size_t index) {
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(kConfig);
  int tensor = 0;
  while (tensor + 1 < kNumParameterTensors && offsets[tensor + 1] <= index) ++tensor;
  return tensor;
}

TEST(TensorParallelShard, EachShardedElementIsHeldByOneRankAndEachReplicatedOneByAll) {
  const std::vector<float> full = numbered_model();
  for (const int tp : kTensorParallelSizes) {
    std::vector<int> holders(full.size(), 0);
    for (int rank = 0; rank < tp; ++rank) {
      const ParameterLayout layout = parameter_layout(kConfig, {whole_model(kConfig)}, {tp, rank});
      for (const float value : to_stage_layout(layout, full)) ++holders[size_t(value)];
    }
    for (size_t i = 0; i < full.size(); ++i)
      ASSERT_EQ(holders[i], is_replicated(tensor_at(i)) ? tp : 1)
          << "tp " << tp << ": element " << i << " of " << parameter_tensor_name(tensor_at(i));
  }
}

TEST(TensorParallelShard, EveryRanksStagePlacedRebuildsTheWholeModel) {
  const std::vector<float> full = numbered_model();
  const std::vector<std::vector<LayerRange>> splits = {{whole_model(kConfig)},
                                                       {{0, 1, true, false}},
                                                       {{1, 2, false, true}}};
  for (const int tp : kTensorParallelSizes) {
    std::vector<float> rebuilt(full.size(), -1.0f);
    for (const std::vector<LayerRange>& chunks : splits)
      for (int rank = 0; rank < tp; ++rank) {
        const ParameterLayout layout = parameter_layout(kConfig, chunks, {tp, rank});
        place_in_full_layout(layout, to_stage_layout(layout, full), rebuilt);
      }
    EXPECT_EQ(rebuilt, full) << "tp " << tp;
  }
}

TEST(TensorParallelShard, SizesAreTheReplicatedTensorsAndOneTpthOfTheOthers) {
  const std::array<size_t, kNumParameterTensors> whole = parameter_tensor_sizes(kConfig);
  for (const int tp : kTensorParallelSizes) {
    size_t expected = 0;
    for (int tensor = 0; tensor < kNumParameterTensors; ++tensor)
      expected += is_replicated(tensor) ? whole[tensor] : whole[tensor] / tp;
    for (int rank = 0; rank < tp; ++rank)
      EXPECT_EQ(parameter_layout(kConfig, {whole_model(kConfig)}, {tp, rank}).size, expected) << "tp " << tp;
  }
}

// Rank 1 of 2, in layer 1: qkvw's local row 0 is q's row C/2 (its first head's), its row C/2 is
// k's row C/2 (full row C + C/2); attprojw's local (0, 0) is the full (0, C/2); fcw's local row 0 is
// the full row 2C; wte's first row is row Vp/2.
TEST(TensorParallelShard, RankHoldsItsHeadsRowsItsInputColumnsAndItsVocabularyRows) {
  const int C = kConfig.channels, Vp = kConfig.padded_vocab_size;
  const std::vector<float> full = numbered_model();
  const ParameterLayout layout = parameter_layout(kConfig, {whole_model(kConfig)}, {2, 1});
  std::vector<float> stage = to_stage_layout(layout, full);
  const ParameterTensors<float> views = chunk_views(stage.data(), layout, 0);
  const ParameterTensors<float> model = point_views(const_cast<float*>(full.data()), kConfig);
  const LayerParameters<float> p = layer_views(views, kConfig, 1), m = layer_views(model, kConfig, 1);
  EXPECT_EQ(p.qkvw[0], m.qkvw[size_t(C / 2) * C]);
  EXPECT_EQ(p.qkvw[size_t(C / 2) * C], m.qkvw[size_t(C + C / 2) * C]);
  EXPECT_EQ(p.qkvb[C / 2], m.qkvb[C + C / 2]);
  EXPECT_EQ(p.attprojw[0], m.attprojw[C / 2]);
  EXPECT_EQ(p.attprojw[C / 2], m.attprojw[C + C / 2]);  // local row 1: the full row 1 from its column C/2
  EXPECT_EQ(p.attprojb[C - 1], m.attprojb[C - 1]);
  EXPECT_EQ(p.fcw[0], m.fcw[size_t(2 * C) * C]);
  EXPECT_EQ(p.fcb[0], m.fcb[2 * C]);
  EXPECT_EQ(p.fcprojw[1], m.fcprojw[2 * C + 1]);
  EXPECT_EQ(views.wte[0], model.wte[size_t(Vp / 2) * C]);
  EXPECT_EQ(views.wpe[0], model.wpe[0]);
}

TEST(TensorParallelShard, TpNotDividingTheModelThrowsOneLine) {
  for (const int tp : {3, 16}) {
    try {
      parameter_layout(kConfig, {whole_model(kConfig)}, {tp, 0});
      ADD_FAILURE() << "tp " << tp << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

}  // namespace
