// The pipeline engine's equivalence on every layout of the world it runs in. Each case trains
// five clipped steps and must give the single-stage run of the same global batch (m * dp
// microbatches): the same loss and gradient norm (before clipping) at every step and, after
// step 1, the same gradients. Bitwise without data parallelism (the same additions in the same
// order on any cut of the model: gpt.cuh's layer ranges, the tied embedding's two shares added
// once, the norm from slot partials), within 1e-6 with replicas but step 1's loss bitwise, and
// then each stage's replicas hold bitwise the same parameters (pipeline_harness.h). A world of
// one rank fails: its only layout is the single-stage run itself. tools/run_tests.sh runs the
// suite at 2, 4 and 8 ranks; the layouts (dp, pp) are
//   -np 2: (1, 2), (2, 1)
//   -np 4: (1, 4), (2, 2), (4, 1)
//   -np 8: (2, 4), (4, 2), and (1, 8) for the interleaved and zero-bubble schedules only.
// On each of them with at most 4 stages: afab and 1f1b at m in {1, 3, 8}, recompute off and on;
// interleaved v = 2 at m in {1, 3, 8} where pp divides m, recompute off and on, v = 3 at m = 4,
// and with 2 or 4 stages v = 2 at m = 4 and at m = 12 (recompute); on 8 stages one case,
// interleaved v = 2, m = 8, 16 layers. Uneven --layers-per-stage on every layout with 2 or 4
// stages (uneven_cases_of). The zero-bubble schedules (zero_bubble_cases_of) on the layouts with
// 2 or 4 stages and 1 or 2 replicas, (1, 2); (1, 4), (2, 2); (2, 4): zb-h1, zb-h2 and zb-v at
// m = pp + 1, recompute off and on, and with an uneven split; and on (1, 8). Without the last
// two they added 0.9, 5.7 and 6.3 s to the suite's 13, 60 and 58 s at
// 2, 4 and 8 ranks (0.9, 6.6 and 8.6 s of CPU; 2026-11-24, load 6-9 on the 2 cores). In the CPU build on 2 cores shared with other jobs (load 10-18,
// 2026-11-23), two runs took 34-35, 91-115 and 88-115 s at 2, 4 and 8 ranks, the suite without
// the v = 3, m = 4 and 12, pp = 8 and uneven cases 27-29, 71-111 and 58-87 s beside them. In CPU
// time (steadier under load) those cases add 15, 28 and 52 % (20-24 s against 17-21, 71-72
// against 54-58, 94-101 against 63-65): on the 6, 37 and 25 s the suite took unloaded before,
// about 7, 47 and 38 s. Interleaved microbatch groups (microbatch_group_cases_of, m not a
// multiple of pp) on the layouts with 2 or 4 stages and 1 or 2 replicas: 4 cases at -np 4,
// 10.8 s at load 7 and 5.5 s at load 1.3, 1.0 s at -np 2; looped BFS one case a layout, 2.7 s at
// -np 4 and 0.25 s at -np 2 (2026-11-26). The same in bf16 on every layout without 8 stages (bf16_cases_of), bitwise
// with dp = 1 and within bf16's tolerance with replicas. --pipeline-layout strings on 4 stages, one
// replica: 2 cases, an uneven one and one whose first and last stages hold no layer (1.3 s at
// -np 4, load 3, 2026-11-27). The fused attention on 4 stages, one replica: 1F1B, recompute on and
// off, fp32 and bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "pipeline/layout_string.h"
#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

constexpr int kSteps = 5;
constexpr const char* kOneRank = "the layouts suite needs mpirun -np 2 or more: one rank has only the single-stage run";

// fp32 gradients summed over 2 or 4 replicas in another association than the single run's
// microbatch loop: a few roundings of 6e-8 each, bounded by 1e-6 of the tensor's largest entry
// (2.7e-7 at most, measured with 4 replicas); through five AdamW steps the losses differ by less
// than 1e-8 relative (step 1's not at all: compared bitwise) and the gradient norms by 2.4e-7 at
// most (a float sum of squares), both inside 1e-6. A norm 1e-4 too large on every step moves the losses by less than 1e-6: only the
// comparison of the norm itself sees it.
Tolerance tolerance_of(int dp) { return dp == 1 ? kBitwise : Tolerance{1e-6, 1e-6, 1e-6}; }

// The layouts (dp, pp) of the world with dp, pp in {1, 2, 4}, and (1, 8) when with_eight_stages.
std::vector<std::pair<int, int>> layouts_of_world(bool with_eight_stages) {
  std::vector<std::pair<int, int>> layouts;
  for (int dp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      if (dp * pp == size_of_world()) layouts.push_back({dp, pp});
  if (with_eight_stages && size_of_world() == 8) layouts.push_back({1, 8});
  return layouts;
}

// The schedule's cases on the layout: recompute off and on, m in {1, 3, 8}. The interleaved
// schedule needs m a multiple of pp and v pp chunks of layers: v = 2 on max(4, 2 pp) layers,
// and also v = 3 with one layer per chunk (m = 4), and on 2 and 4 stages m = 4 (on 4 stages
// as many microbatches as stages: stage 0 all warm-up, stage 3 four forward-backward pairs)
// and m = 12 (a long steady state). On 8 stages only the interleaved schedule, with m = 8,
// v = 2, 16 layers.
std::vector<Case> cases_of(ScheduleKind schedule, int dp, int pp) {
  if (pp == 8) return {{dp, pp, schedule, 2, false, 8, 16}};
  const bool interleaved = schedule == ScheduleKind::interleaved;
  std::vector<Case> cases;
  for (int m : {1, 3, 8})
    for (bool recompute : {false, true})
      if (!interleaved || m % pp == 0)
        cases.push_back({dp, pp, schedule, interleaved ? 2 : 1, recompute, m, interleaved ? std::max(4, 2 * pp) : 4});
  if (interleaved) {
    cases.push_back({dp, pp, schedule, 3, false, 4, 3 * pp});
    if (pp > 1) {
      cases.push_back({dp, pp, schedule, 2, false, 4, 2 * pp});
      cases.push_back({dp, pp, schedule, 2, true, 12, 2 * pp});
    }
  }
  return cases;
}

// Uneven --layers-per-stage on 2 and 4 stages: 1F1B at m = 3 (on 4 stages fewer microbatches
// than stages), and on 2 stages the interleaved schedule with the two 2-layer virtual stages on
// different stages, none of them the even split (1,2,2,1 for 6 layers in 4 chunks).
std::vector<Case> uneven_cases_of(int dp, int pp) {
  if (pp == 2)
    return {{dp, pp, ScheduleKind::one_f_one_b, 1, false, 3, 4, {3, 1}},
            {dp, pp, ScheduleKind::interleaved, 2, false, 4, 6, {1, 1, 2, 2}}};
  return {{dp, pp, ScheduleKind::one_f_one_b, 1, false, 3, 6, {2, 1, 2, 1}}};
}

// The zero-bubble schedules on the layouts with 2 or 4 stages and 1 or 2 replicas: m = pp + 1
// (at least p, not a multiple of it), recompute off and on; zb-v on 2 pp layers (one per chunk);
// and an uneven --layers-per-stage, whose stages (zb-v: chunks) hold 1 to 3 layers, so that a
// stage's weight-gradient pass is longer than its neighbours'. On 8 stages (-np 8) one case,
// m = 9, one layer per stage (zb-v: per chunk).
std::vector<Case> zero_bubble_cases_of(ScheduleKind schedule, int dp, int pp) {
  const bool v_shape = schedule == ScheduleKind::zb_v;
  const int chunks = v_shape ? 2 : 1;
  if (pp == 8) return {{dp, pp, schedule, chunks, false, pp + 1, chunks * pp}};
  std::vector<Case> cases;
  for (bool recompute : {false, true})
    cases.push_back({dp, pp, schedule, chunks, recompute, pp + 1, v_shape ? 2 * pp : 4});
  std::vector<int> uneven = pp == 2 ? std::vector<int>{3, 1} : std::vector<int>{2, 1, 3, 1};
  if (v_shape) uneven = pp == 2 ? std::vector<int>{1, 3, 2, 1} : std::vector<int>{1, 2, 1, 1, 3, 1, 1, 2};
  int layers = 0;
  for (int n : uneven) layers += n;
  cases.push_back({dp, pp, schedule, chunks, false, pp + 1, layers, uneven});
  return cases;
}

// Interleaved microbatch groups (--microbatch-group N) with m not a multiple of pp, v = 2, one
// layer per chunk, on the layouts with 2 or 4 stages and 1 or 2 replicas: one group of all m
// (pp 4: m = 6, N = 6; pp 2: m = 3, N = 3), and two groups, the last shorter but not below pp (pp 4:
// m = 9, N = 5; pp 2: m = 5, N = 3).
std::vector<Case> microbatch_group_cases_of(int dp, int pp) {
  const int one_group = pp == 4 ? 6 : 3, two_groups = pp == 4 ? 9 : 5, group = pp == 4 ? 5 : 3;
  return {{dp, pp, ScheduleKind::interleaved, 2, false, one_group, 2 * pp, {}, false, one_group},
          {dp, pp, ScheduleKind::interleaved, 2, false, two_groups, 2 * pp, {}, false, group}};
}

void expect_zero_bubble_layouts_match(ScheduleKind schedule) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(true))
    if (pp > 1 && dp <= 2) {
      expect_cases_match(zero_bubble_cases_of(schedule, dp, pp), kSteps, tolerance_of(dp));
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2 or 4 stages and 1 or 2 replicas";
}

void expect_every_layout_matches(ScheduleKind schedule) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  const auto layouts = layouts_of_world(schedule == ScheduleKind::interleaved);
  ASSERT_FALSE(layouts.empty()) << "no layout of dp, pp in {1, 2, 4} for " << size_of_world() << " ranks";
  for (const auto& [dp, pp] : layouts) expect_cases_match(cases_of(schedule, dp, pp), kSteps, tolerance_of(dp));
}

}  // namespace

TEST(PipelineLayouts, AfabGivesTheSingleStageRun) { expect_every_layout_matches(ScheduleKind::afab); }
TEST(PipelineLayouts, OneFOneBGivesTheSingleStageRun) { expect_every_layout_matches(ScheduleKind::one_f_one_b); }
TEST(PipelineLayouts, InterleavedGivesTheSingleStageRun) { expect_every_layout_matches(ScheduleKind::interleaved); }

TEST(PipelineLayouts, ZeroBubbleH1GivesTheSingleStageRun) { expect_zero_bubble_layouts_match(ScheduleKind::zb_h1); }
TEST(PipelineLayouts, ZeroBubbleH2GivesTheSingleStageRun) { expect_zero_bubble_layouts_match(ScheduleKind::zb_h2); }
TEST(PipelineLayouts, ZeroBubbleVGivesTheSingleStageRun) { expect_zero_bubble_layouts_match(ScheduleKind::zb_v); }

// Document-aligned microbatches (issue 34), each at its own T with padding, on the layouts with 2,
// 4 or 8 stages and 1 or 2 replicas: 1F1B recompute off and on, interleaved v = 2, zb-h1 and zb-v.
// Every rank computes every microbatch's T from the data position: a message's two ends must
// agree on it, or the CPU NCCL's check (tools/run_tests.sh runs this suite with it) names both
// calls' counts. The single run's step 1 must itself hold different lengths and padding.
TEST(PipelineLayouts, VariableLengthGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(true))
    if (pp > 1 && dp <= 2) {
      const int m = pp + 1, layers = std::max(4, pp);
      std::vector<Case> cases = {{dp, pp, ScheduleKind::one_f_one_b, 1, false, m, layers},
                                 {dp, pp, ScheduleKind::one_f_one_b, 1, true, m, layers},
                                 {dp, pp, ScheduleKind::interleaved, 2, false, 2 * pp, 2 * pp},
                                 {dp, pp, ScheduleKind::zb_h1, 1, false, m, layers},
                                 {dp, pp, ScheduleKind::zb_v, 2, false, m, 2 * pp}};
      for (Case& c : cases) c.documents = true;
      expect_cases_match(cases, kSteps, tolerance_of(dp));
      for (const Case& c : cases) {
        const Outcome& single = reference(c, kSteps);
        EXPECT_GT(std::set<int>(single.lengths.begin(), single.lengths.end()).size(), 1u)
            << describe(c) << ": step 1's microbatches should differ in length";
        DocumentReader reader = make_document_reader(documents(), kB, kT, false, 1);
        size_t real = 0;
        for (int k = 0; k < c.m * c.dp; ++k) real += microbatch_real_tokens(reader, k, kT);
        EXPECT_LT(real, size_t(kB) * kT * c.m * c.dp) << describe(c) << ": step 1 should hold padding";
      }
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2, 4 or 8 stages and 1 or 2 replicas";
}

// The schedules the test above leaves out, with document-aligned microbatches of different
// lengths in each step, on every rank as a stage of one replica (p = 2, 4 and 8 in the np 2, 4
// and 8 modes): afab, zb-h2, v-half, v-min, looped BFS, zb-interleaved and DualPipeV, each at its
// fewest microbatches (m = p + 1; zb-interleaved one round, m = p; DualPipeV m = 2 p). Lengths
// change no message's order, only its count, so each is the single run bitwise or the CPU NCCL's
// check names the two counts.
TEST(PipelineLayouts, VariableLengthRunsEveryOtherSchedule) {
  const int pp = size_of_world();
  ASSERT_GE(pp, 2) << kOneRank;
  const int m = pp + 1, layers = std::max(4, pp);
  std::vector<Case> cases = {{1, pp, ScheduleKind::afab, 1, false, m, layers},
                             {1, pp, ScheduleKind::zb_h2, 1, false, m, layers},
                             {1, pp, ScheduleKind::v_half, 2, false, m, 2 * pp},
                             {1, pp, ScheduleKind::v_min, 2, true, m, 2 * pp},
                             {1, pp, ScheduleKind::looped_bfs, 2, false, m, 2 * pp},
                             {1, pp, ScheduleKind::zb_interleaved, 2, false, pp, 2 * pp},
                             {1, pp, ScheduleKind::dual_pipe_v, 2, false, 2 * pp, 2 * pp}};
  for (Case& c : cases) c.documents = true;
  expect_cases_match(cases, kSteps, kBitwise);
  for (const Case& c : cases) {
    const Outcome& single = reference(c, kSteps);
    EXPECT_GT(std::set<int>(single.lengths.begin(), single.lengths.end()).size(), 1u)
        << describe(c) << ": step 1's microbatches should differ in length";
  }
}

// The controllable-memory V schedules (pipeline/controllable_memory.h) where the zero-bubble ones
// run (2 or 4 stages, 1 or 2 replicas): v-half and v-min at m = pp + 1, one layer per chunk,
// v-min with recompute. Their orders differ from zb-v's only in where each compute sits, which
// these cases cover; the bitwise sums come from each chunk's W's in microbatch order.
TEST(PipelineLayouts, ControllableMemoryVGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if (pp > 1 && dp <= 2) {
      expect_cases_match({{dp, pp, ScheduleKind::v_half, 2, false, pp + 1, 2 * pp},
                          {dp, pp, ScheduleKind::v_min, 2, true, pp + 1, 2 * pp}},
                         kSteps, tolerance_of(dp));
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2 or 4 stages and 1 or 2 replicas";
}

TEST(PipelineLayouts, InterleavedMicrobatchGroupsGiveTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if ((pp == 2 || pp == 4) && dp <= 2) {
      expect_cases_match(microbatch_group_cases_of(dp, pp), kSteps, tolerance_of(dp));
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2 or 4 stages and 1 or 2 replicas";
}

// Looped BFS (v = 2, one layer per chunk, m = pp + 1) on the layouts with 2 or 4 stages and 1 or 2
// replicas: every stage holds every microbatch of both chunks, the backwards in microbatch order.
TEST(PipelineLayouts, LoopedBfsGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if ((pp == 2 || pp == 4) && dp <= 2) {
      expect_cases_match({{dp, pp, ScheduleKind::looped_bfs, 2, false, pp + 1, 2 * pp}}, kSteps, tolerance_of(dp));
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2 or 4 stages and 1 or 2 replicas";
}

// The interleaved zero-bubble schedule (pipeline/interleaved_zero_bubble.h) where the zero-bubble
// ones run, one case per layout, v = 2, one layer per chunk: without replicas m = 2 pp (two rounds,
// a steady state), recompute off; with 2 replicas m = pp (one round), recompute on. Its W's run in
// an order of chunks no other schedule has, which these cases cover; the bitwise sums come from
// each chunk's W's in microbatch order.
TEST(PipelineLayouts, InterleavedZeroBubbleGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if (pp > 1 && dp <= 2) {
      const bool replicas = dp > 1;
      expect_cases_match({{dp, pp, ScheduleKind::zb_interleaved, 2, replicas, replicas ? pp : 2 * pp, 2 * pp}}, kSteps,
                         tolerance_of(dp));
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2 or 4 stages and 1 or 2 replicas";
}

TEST(PipelineLayouts, UnevenLayerSplitGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if (pp > 1) {
      expect_cases_match(uneven_cases_of(dp, pp), kSteps, tolerance_of(dp));
      ran = true;
    }
  EXPECT_TRUE(ran) << "no layout of " << size_of_world() << " ranks has 2 or 4 stages";
}

// --pipeline-layout on 4 stages, 1F1B at m = 3, one process's 6 layers (its cached reference is
// the uneven cases'): an uneven split, and the first stage the embedding alone and the last the
// head alone, ranges without blocks (pipeline/layout_string.h).
TEST(PipelineLayouts, LayoutStringGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if (dp == 1 && pp == 4) {
      std::vector<Case> cases;
      for (const char* text : {"Et|t*3|t|tL", "E|t*3|t*3|L"})
        cases.push_back({dp, pp, ScheduleKind::one_f_one_b, 1, false, 3, 6, pipeline_layout_counts(text, pp, 1, 6)});
      expect_cases_match(cases, kSteps, tolerance_of(dp));
      ran = true;
    }
  if (!ran) GTEST_SKIP() << "no layout of " << size_of_world() << " ranks has 1 replica of 4 stages";
}

// The fused attention (--attention fused) on 4 stages, one replica: 1F1B at m = 3 with recompute
// (each backward runs its forward again from the slot's input) and without, in fp32 and bf16,
// bitwise the single-stage run with the fused attention.
TEST(PipelineLayouts, FusedAttentionGivesTheSingleStageRun) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  bool ran = false;
  for (const auto& [dp, pp] : layouts_of_world(false))
    if (dp == 1 && pp == 4) {
      std::vector<Case> cases;
      for (bool bf16 : {false, true})
        for (bool recompute : {true, false}) {
          Case c{dp, pp, ScheduleKind::one_f_one_b, 1, recompute, 3, 4, {}, bf16};
          c.fused = true;
          cases.push_back(c);
        }
      expect_cases_match(cases, kSteps, kBitwise);
      ran = true;
    }
  if (!ran) GTEST_SKIP() << "no layout of " << size_of_world() << " ranks has 1 replica of 4 stages";
}

namespace {

// bf16 (bf16 parameters, gradients, activations and messages, fp32 master weights, stochastic
// rounding): each schedule with recompute off and on, afab and 1F1B at m = 5 (a steady state on 2
// and 4 stages), interleaved v = 2 at m = 4, and where zero_bubble_cases_of runs (2 or 4 stages,
// 1 or 2 replicas) zb-h1, zb-h2 and zb-v at m = 5, zb-v on 2 pp layers. In the CPU build on 2
// cores shared with other jobs (load 3-6, 2026-11-24) the cases without zero-bubble took 7, 19
// and 17 s at 2, 4 and 8 ranks; with them 7, 22 and 19 s (load 2-5, the same day).
constexpr int kBf16Microbatches = 5;
std::vector<Case> bf16_cases_of(int dp, int pp) {
  std::vector<Case> cases;
  const bool zero_bubble = pp > 1 && dp <= 2;
  for (bool recompute : {false, true}) {
    cases.push_back({dp, pp, ScheduleKind::afab, 1, recompute, kBf16Microbatches, 4, {}, true});
    cases.push_back({dp, pp, ScheduleKind::one_f_one_b, 1, recompute, kBf16Microbatches, 4, {}, true});
    cases.push_back({dp, pp, ScheduleKind::interleaved, 2, recompute, 4, std::max(4, 2 * pp), {}, true});
    if (zero_bubble) {
      cases.push_back({dp, pp, ScheduleKind::zb_h1, 1, recompute, kBf16Microbatches, 4, {}, true});
      cases.push_back({dp, pp, ScheduleKind::zb_h2, 1, recompute, kBf16Microbatches, 4, {}, true});
      cases.push_back({dp, pp, ScheduleKind::zb_v, 2, recompute, kBf16Microbatches, 2 * pp, {}, true});
    }
  }
  return cases;
}

// bf16 with replicas. Each microbatch's gradient is rounded into the bf16 sum once, to 2^-9 of
// the sum: m dp roundings in the single run, m per replica and the bf16 all-reduce's in the
// replicas, so the two differ by at most 2 m dp 2^-9 of the gradient's scale (m = 5: 3.9e-2 with
// 2 replicas, 7.8e-2 with 4; measured 1.1e-2 and 2.3e-2). The norm, whose squares are summed in
// fp32, is off by no more (measured 2.3e-3 and 3.4e-3).
// The loss. Step 1 runs on the same parameters and microbatches, so only the association of its
// double sum can differ, which is exact: it is compared bitwise (expect_cases_match). After that
// the fp32 master weights differ by a fraction of the learning rate, and stochastic rounding with
// the same bits puts the bf16 parameters one ulp apart wherever the two master weights straddle a
// rounding threshold: the loss moves by the loss gradient times those flips, a random sum over
// which parameters straddle, which the rounding seed redraws. Measured at 2, 4 and 8 ranks, every case
// here, steps 2 to 5 (CPU build, 2026-11-26): at most 6.8e-5 relative with the test's seed 5,
// and 4.7e-5 to 6.8e-5 (mean 5.5e-5) as the largest of each of the seeds 1 to 9. The bound,
// 2^-12 (2.4e-4), is 3.6 times the largest draw, for a GPU's other rounding of the products
// (not measured here); it was 2^-8, 57 times the measured.
Tolerance bf16_tolerance_of(int dp) {
  if (dp == 1) return kBitwise;
  const double gradient = 2.0 * kBf16Microbatches * dp * std::ldexp(1.0, -9);
  return {std::ldexp(1.0, -12), gradient, gradient};
}

}  // namespace

TEST(PipelineLayouts, Bf16GivesTheSingleStageBf16Run) {
  ASSERT_GE(size_of_world(), 2) << kOneRank;
  for (const auto& [dp, pp] : layouts_of_world(false))
    expect_cases_match(bf16_cases_of(dp, pp), kSteps, bf16_tolerance_of(dp));
}

// DualPipeV (pipeline/dual_pipe_v.h) on all ranks as stages, one replica (bitwise), m = 2 pp (its
// least), one layer per chunk: once plain, once with recompute, once in bf16; on 8 stages (-np 8)
// only plain, the order's shape at a larger p (the three took 24 s there, loaded, 2026-11-27).
// Its whole backwards and split ones in one step, the pairs' two chunks at once on two compute
// streams, and each chunk's B's and W's in microbatch order are what these cases cover.
TEST(PipelineLayouts, DualPipeVGivesTheSingleStageRun) {
  const int pp = size_of_world();
  ASSERT_GE(pp, 2) << kOneRank;
  expect_cases_match({{1, pp, ScheduleKind::dual_pipe_v, 2, false, 2 * pp, 2 * pp}}, kSteps, kBitwise);
  if (pp == 8) return;
  Case bf16{1, pp, ScheduleKind::dual_pipe_v, 2, false, 2 * pp, 2 * pp};
  bf16.bf16 = true;
  expect_cases_match({{1, pp, ScheduleKind::dual_pipe_v, 2, true, 2 * pp, 2 * pp}}, kSteps, kBitwise);
  expect_cases_match({bf16}, kSteps, bf16_tolerance_of(1));
}
