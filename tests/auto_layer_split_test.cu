// --layers-per-stage auto's objective (trainer/program/auto_layer_split.h) against splits derived by
// hand: a synchronous schedule balances F + B per microbatch, PipeDream F + B + AdamW / K (its updates
// run in the steady state, a synchronous schedule's after the flush), and PipeDream's predicted step
// is the steady one, m periods of the heaviest stage. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <vector>

#include "trainer/program/auto_layer_split.h"

namespace {

// A block and the head F 1, B 2; the embedding's F + B nothing, but its AdamW (wte) 6, as the head's
// (the tied copy); a block's AdamW 0: the large vocabulary of docs/pipeline.md, made exact.
const MeasuredLayerCosts kMeasured{1, 2, 0, 0, 1, 2, 0, 6, 6};

PipelineLayout layout(int update_every) {
  PipelineLayout layout{ScheduleKind::one_f_one_b, 4, 1, false, {}};
  if (update_every > 0) layout.pipedream = PipeDreamLayout{{update_every, true, false}, 3};
  return layout;
}

}  // namespace

// 8 blocks over 4 stages. Synchronous: blocks 3, head 3, embedding 0; 27 over 4 is above 6, so the
// bottleneck is at least 9, which the even split 2,2,2,2 reaches (6, 6, 6, 9): it stays.
// PipeDream at K = 1: stage 0 is 6 + 3 n0, the last 9 + 3 n3, a middle one 3 n. A bottleneck of 9
// holds 1 + 3 + 3 + 0 = 7 blocks, too few; 12 holds n0 <= 2, n3 <= 1: nearest the even split with
// the lexicographically least counts, 2,2,3,1 (12, 6, 9, 12; the even split's last stage: 15).
// At K = 2 the updates weigh 3: bottleneck 9 (n0 <= 2, middle <= 3, n3 <= 1), again 2,2,3,1.
TEST(AutoLayerSplit, PipeDreamBalancesItsUpdatesWithTheComputes) {
  EXPECT_EQ(partition_layers(layer_costs(kMeasured, 8, false, updates_per_microbatch(layout(0))), 4),
            (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(updates_per_microbatch(layout(1)), 1.0);
  EXPECT_EQ(updates_per_microbatch(layout(2)), 0.5);
  const LayerCosts every = layer_costs(kMeasured, 8, false, updates_per_microbatch(layout(1)));
  EXPECT_EQ(partition_layers(every, 4), (std::vector<int>{2, 2, 3, 1}));
  EXPECT_EQ(chunk_times(every, {2, 2, 3, 1}), (std::vector<double>{12, 6, 9, 12}));
  EXPECT_EQ(chunk_times(every, {2, 2, 2, 2}), (std::vector<double>{12, 6, 6, 15}));
  EXPECT_EQ(partition_layers(layer_costs(kMeasured, 8, false, updates_per_microbatch(layout(2))), 4),
            (std::vector<int>{2, 2, 3, 1}));
}

// PipeDream's step is m = 4 periods of the heaviest stage: 4 x 12 for 2,2,3,1 and 4 x 15 for the even
// split. 1F1B's even split, simulated with the heaviest stage's F 3 and B 6 (the last: 2 blocks and
// the head), flushes: (m + p - 1) (3 + 6) = 63.
TEST(AutoLayerSplit, PipeDreamPredictsTheSteadyStep) {
  EXPECT_EQ(predicted_step_ns(layout(1), 4, kMeasured, 8, {2, 2, 3, 1}), 48);
  EXPECT_EQ(predicted_step_ns(layout(1), 4, kMeasured, 8, {2, 2, 2, 2}), 60);
  EXPECT_EQ(predicted_step_ns(layout(0), 4, kMeasured, 8, {2, 2, 2, 2}), 63);
}
