// The layout advisor (trainer/program/layout_advisor.h): the FLOP model against counts by hand, the
// enumeration and ranking on models whose answers are known (AFAB never ahead of 1F1B, every listed
// plan under the limit, a tight limit leaves only recompute, nothing fitting names the smallest
// plan), the rates read back from a trace, and the command line of the best; with tp > 1 sequence
// parallelism beside tp alone, its collectives by hand. Host code only.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/memory_plan.h"
#include "tests/error_message.h"
#include "trainer/program/layout_advisor.h"

namespace {

TrainOptions parse(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "train");
  std::vector<const char*> argv;
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  return parse_train_options(int(argv.size()), argv.data());
}

// The default model's size with the vocabulary given (no data file read).
const std::vector<std::string> kModel = {"--vocab", "256", "--plan-layouts"};

bool same_layout_but_schedule(const RankedLayout& a, const RankedLayout& b) {
  return a.pp == b.pp && a.dp == b.dp && a.tp == b.tp && a.options.microbatches == b.options.microbatches &&
         a.options.recompute == b.options.recompute && a.options.dtype == b.options.dtype &&
         a.options.sequence_parallel == b.options.sequence_parallel;
}

TEST(LayoutAdvisor, FlopsOfAChunkAreTheMatmulsAttentionAndHead) {
  const GPTConfig config = make_gpt_config(2, 4, 64, 32, 256);  // C 64, T 32, Vp 256
  const int B = 3, T = 32;
  const double tokens = B * T, block = 24 * tokens * 64 * 64 + 4 * tokens * T * 64, head = 2 * tokens * 64 * 256;
  const ChunkFlops body = chunk_flops(config, B, T, {0, 2, true, false}, false);
  EXPECT_DOUBLE_EQ(body.forward, 2 * block);  // the embedding's look-up counts nothing
  const ChunkFlops last = chunk_flops(config, B, T, {1, 2, false, true}, false);
  EXPECT_DOUBLE_EQ(last.forward, block + head);
  // I and W together are twice the forward: attention's backward (twice its forward) all in I.
  EXPECT_DOUBLE_EQ(last.backward_input + last.backward_weight, 2 * last.forward);
  EXPECT_DOUBLE_EQ(last.backward_weight, 24 * tokens * 64 * 64 + head);
  const ChunkFlops again = chunk_flops(config, B, T, {1, 2, false, true}, true);
  EXPECT_DOUBLE_EQ(again.backward_input, last.backward_input + last.forward);  // recompute: F again before I
  EXPECT_DOUBLE_EQ(again.backward_weight, last.backward_weight);
}

TEST(LayoutAdvisor, EveryLayoutOfTheWorldKeepsTheGlobalBatchAndIsRankedByStep) {
  for (int world : {4, 8}) {
    const std::vector<RankedLayout> layouts =
        all_layouts(parse({"--vocab", "256", "--microbatches", "8", "--plan-layouts"}), world, flop_cost_rates());
    ASSERT_FALSE(layouts.empty());
    std::vector<std::string> schedules;
    for (size_t i = 0; i < layouts.size(); ++i) {
      const RankedLayout& l = layouts[i];
      EXPECT_EQ(l.pp * l.dp * l.tp, world);
      EXPECT_EQ(l.options.microbatches * l.dp, 8);  // 8 microbatches of the 1 replica asked for
      if (i > 0) {
        EXPECT_LE(layouts[i - 1].step, l.step * (1 + 1e-9));
      }
      schedules.push_back(l.options.schedule);
    }
    for (const char* schedule : {"afab", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"})
      EXPECT_NE(std::find(schedules.begin(), schedules.end(), schedule), schedules.end()) << schedule << ", " << world;
  }
}

TEST(LayoutAdvisor, AllForwardAllBackwardNeverRanksAheadOfOneFOneB) {
  const std::vector<RankedLayout> layouts =
      all_layouts(parse({"--vocab", "256", "--microbatches", "8", "--plan-layouts"}), 4, flop_cost_rates());
  int compared = 0;
  for (size_t a = 0; a < layouts.size(); ++a) {
    if (layouts[a].options.schedule != "afab") continue;
    for (size_t b = 0; b < layouts.size(); ++b) {
      if (layouts[b].options.schedule != "1f1b" || !same_layout_but_schedule(layouts[a], layouts[b])) continue;
      ++compared;
      EXPECT_LT(b, a) << "afab on " << layouts[a].pp << " x " << layouts[a].dp;
      EXPECT_LE(layouts[b].peak, layouts[a].peak);
    }
  }
  EXPECT_GT(compared, 0);
}

// Activations dominate (long sequences, a small model): recompute's plans are the smallest of tp alone.
const std::vector<std::string> kLongSequences = {"--vocab", "256", "--dim", "64", "--seq-len", "256", "--batch", "16",
                                                 "--microbatches", "8", "--plan-layouts"};

// Among the layouts without sequence parallelism, which shrinks the activations too (its tp 4
// plan without recompute is the smallest of all here).
TEST(LayoutAdvisor, ATightLimitLeavesOnlyRecomputeAndEveryListedPlanIsUnderIt) {
  std::vector<RankedLayout> layouts = all_layouts(parse(kLongSequences), 4, flop_cost_rates());
  std::erase_if(layouts, [](const RankedLayout& l) { return l.options.sequence_parallel; });
  uint64_t smallest_without_recompute = ~uint64_t(0);
  for (const RankedLayout& l : layouts)
    if (!l.options.recompute) smallest_without_recompute = std::min(smallest_without_recompute, l.peak);
  const uint64_t limit = smallest_without_recompute - 1;
  const std::vector<RankedLayout> fit = layouts_that_fit(layouts, 4, limit);
  ASSERT_FALSE(fit.empty());
  size_t under = 0;
  for (const RankedLayout& l : layouts) under += l.peak <= limit;
  EXPECT_EQ(fit.size(), under);
  for (const RankedLayout& l : fit) {
    EXPECT_TRUE(l.options.recompute) << l.options.schedule << " " << l.pp << " x " << l.dp;
    EXPECT_LE(l.peak, limit);
  }
}

TEST(LayoutAdvisor, NothingFittingNamesTheSmallestPlan) {
  const std::vector<RankedLayout> layouts = all_layouts(parse(kLongSequences), 4, flop_cost_rates());
  uint64_t smallest = ~uint64_t(0);
  for (const RankedLayout& l : layouts) smallest = std::min(smallest, l.peak);
  const std::string error = error_of([&] { layouts_that_fit(layouts, 4, smallest - 1); });
  EXPECT_NE(error.find("no layout of 4 ranks fits"), std::string::npos) << error;
  EXPECT_NE(error.find("needs " + format_bytes(smallest)), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

// Two stages, one replica, two microbatches of fused B; forward 2 ms and 6 ms in all, backward 12 ms.
const std::string kTrace =
    "{\"traceEvents\": [\n"
    "{\"name\": \"F0\", \"cat\": \"forward\", \"ph\": \"X\", \"ts\": 0, \"dur\": 1000, \"pid\": 0, \"tid\": 0},\n"
    "{\"name\": \"F1\", \"cat\": \"forward\", \"ph\": \"X\", \"ts\": 0, \"dur\": 5000, \"pid\": 0, \"tid\": 1},\n"
    "{\"name\": \"sF0\", \"cat\": \"transfer\", \"ph\": \"X\", \"ts\": 0, \"dur\": 0.02, \"pid\": 0, \"tid\": 0, "
    "\"args\": {\"used\": \"(measured 1.000-1.250 ms)\"}},\n"
    "{\"name\": \"rF0\", \"cat\": \"transfer\", \"ph\": \"X\", \"ts\": 0, \"dur\": 400, \"pid\": 0, \"tid\": 1},\n"
    "{\"name\": \"B0\", \"cat\": \"backward\", \"ph\": \"X\", \"ts\": 0, \"dur\": 12000, \"pid\": 0, \"tid\": 1}\n"
    "],\n\"otherData\": {\"microbatches\": \"2\", \"recompute\": \"off\"}}\n";

TEST(LayoutAdvisor, MeasuredRatesAreEachKindsTimeOverItsFlops) {
  const GPTConfig config = make_gpt_config(2, 4, 64, 32, 256);
  const ChunkFlops whole = chunk_flops(config, 3, 32, {0, 2, true, true}, false);
  const CostRates rates = measured_cost_rates(kTrace, config, 3, 32);
  EXPECT_DOUBLE_EQ(rates.forward, 6.0 / (2 * whole.forward));
  EXPECT_DOUBLE_EQ(rates.backward_input, 12.0 / (2 * (whole.backward_input + whole.backward_weight)));
  EXPECT_DOUBLE_EQ(rates.backward_weight, rates.backward_input);
  EXPECT_NEAR(rates.latency, 0.25, 1e-12);  // the measured times, not the drawn 0.02 us
  EXPECT_EQ(rates.unit, "ms");
}

TEST(LayoutAdvisor, AMalformedTraceIsOneLine) {
  const GPTConfig config = make_gpt_config(2, 4, 64, 32, 256);
  const auto error = [&](const std::string& text) { return error_of([&] { measured_cost_rates(text, config, 3, 32); }); };
  EXPECT_NE(error("{}").find("not a --trace file"), std::string::npos);
  std::string text = kTrace;
  EXPECT_NE(error(text.replace(text.find("\"dur\": 5000"), 11, "\"dur\": x")).find("'x' is not"), std::string::npos);
  text = kTrace;
  EXPECT_NE(error(text.replace(text.find("\"backward\""), 10, "\"other\"")).find("no backward"), std::string::npos);
  text = kTrace;
  EXPECT_NE(error(text.replace(text.find("\"microbatches\""), 14, "\"m\"")).find("microbatches"), std::string::npos);
}

TEST(LayoutAdvisor, TheCommandLineKeepsTheModelFlagsAndSetsTheLayout) {
  const std::vector<std::string> arguments = {"--plan-layouts", "--world", "8", "--dim=64", "--schedule", "afab",
                                              "--recompute", "--lr", "0.001", "--microbatches=2"};
  RankedLayout layout{parse(kModel), 4, 2, 1, 2, 1, 0, 0, false};
  layout.options.schedule = "interleaved", layout.options.virtual_stages = 2, layout.options.microbatches = 4;
  layout.options.dtype = "bf16";
  EXPECT_EQ(layout_command(layout, arguments, 8),
            "mpirun -np 8 ./train --dim=64 --lr 0.001 --pp 4 --dp 2 --schedule interleaved --virtual-stages 2 "
            "--microbatches 4 --dtype bf16");
  layout.pp = 2, layout.tp = 2;  // and a --tp the user gave is the layout's
  EXPECT_EQ(layout_command(layout, {"--tp", "4", "--dim=64"}, 8),
            "mpirun -np 8 ./train --dim=64 --pp 2 --dp 2 --tp 2 --schedule interleaved --virtual-stages 2 "
            "--microbatches 4 --dtype bf16");
}

// A tp rank's FLOPs are a tp-th; its all-reduces per microbatch are the ones step_counts counts
// (TensorParallelCounts, tests/cpu/mpi/tensor_parallel_counts_test.cu), by hand: F 2 per block of
// B T C, the embedding 1, the head's loss 2 (B T and 2 B T floats); I 2 per block and the head 1;
// with recompute I also the forward's.
TEST(LayoutAdvisor, TpRanksFlopsAndAllReducesOfAChunkAreCountedByHand) {
  const GPTConfig config = make_gpt_config(2, 4, 64, 32, 256);
  const int B = 3, T = 32;
  const double tokens = B * T, btc = tokens * 64 * 4;
  const ChunkFlops one = chunk_flops(config, B, T, {0, 2, true, true}, false),
                   two = chunk_flops(config, B, T, {0, 2, true, true}, false, 2);
  EXPECT_DOUBLE_EQ(two.forward, one.forward / 2);
  EXPECT_DOUBLE_EQ(two.backward_input, one.backward_input / 2);
  EXPECT_DOUBLE_EQ(two.backward_weight, one.backward_weight / 2);
  const ChunkAllReduces none = chunk_all_reduces(config, B, T, {0, 2, true, true}, false, 1, 4);
  EXPECT_EQ(none.forward_calls + none.forward_bytes + none.input_calls + none.input_bytes, 0);
  const ChunkAllReduces whole = chunk_all_reduces(config, B, T, {0, 2, true, true}, false, 2, 4);
  EXPECT_DOUBLE_EQ(whole.forward_calls, 2 * 2 + 1 + 2);
  EXPECT_DOUBLE_EQ(whole.forward_bytes, 5 * btc + 3 * tokens * 4);
  EXPECT_DOUBLE_EQ(whole.input_calls, 2 * 2 + 1);
  EXPECT_DOUBLE_EQ(whole.input_bytes, 5 * btc);
  const ChunkAllReduces middle = chunk_all_reduces(config, B, T, {1, 2, false, false}, true, 4, 2);
  EXPECT_DOUBLE_EQ(middle.forward_calls, 2);
  EXPECT_DOUBLE_EQ(middle.forward_bytes, 2 * btc / 2);  // bf16: 2 bytes an element
  EXPECT_DOUBLE_EQ(middle.input_calls, 2 + 2);          // recompute: the forward's again
  EXPECT_DOUBLE_EQ(middle.input_bytes, 2 * btc);
}

// --sequence-parallel's collectives per microbatch, as step_counts counts them (tests/step_counts_test.py),
// by hand: F 2 all-gathers and 2 reduce-scatters per block, the embedding 1, the head 1 and the
// loss's 2; I per block 4 all-gathers, 2 reduce-scatters and the 4 C LayerNorm sums, the head 1
// all-gather, 1 reduce-scatter and lnf's 2 C, the embedding 1 all-gather. An all-gather or
// reduce-scatter of B T C sends what an all-reduce of half of it does.
TEST(LayoutAdvisor, SequenceParallelCollectivesOfAChunkAreCountedByHand) {
  const GPTConfig config = make_gpt_config(2, 4, 64, 32, 256);
  const int B = 3, T = 32;
  const double tokens = B * T, half = tokens * 64 * 4 / 2;
  const ChunkAllReduces whole = chunk_sequence_parallel_collectives(config, B, T, {0, 2, true, true}, false, 2, 4);
  EXPECT_DOUBLE_EQ(whole.forward_calls, 4 * 2 + 1 + 3);
  EXPECT_DOUBLE_EQ(whole.forward_bytes, (4 * 2 + 1 + 1) * half + 3 * tokens * 4);
  EXPECT_DOUBLE_EQ(whole.input_calls, 7 * 2 + 3 + 1);
  EXPECT_DOUBLE_EQ(whole.input_bytes, (6 * 2 + 2 + 1) * half + (4 * 2 + 2) * 64 * 4);
  const ChunkAllReduces middle = chunk_sequence_parallel_collectives(config, B, T, {1, 2, false, false}, true, 4, 2);
  EXPECT_DOUBLE_EQ(middle.forward_calls, 4);
  EXPECT_DOUBLE_EQ(middle.forward_bytes, 4 * half / 2);  // bf16
  EXPECT_DOUBLE_EQ(middle.input_calls, 7 + 4);           // recompute: the forward's again
  EXPECT_DOUBLE_EQ(middle.input_bytes, 6 * half / 2 + 4 * 64 * 2 + 4 * half / 2);
}

// Every layout of tp > 1 comes also with --sequence-parallel: its plan (the memory plan counts the
// sharded residual stream) holds less than the same layout's without it, and its backward sends
// more (the LayerNorm outputs gathered again), so it never ranks ahead of it on the step alone.
TEST(LayoutAdvisor, SequenceParallelLayoutsHoldLessAndTakeLongerThanTpAlone) {
  const std::vector<RankedLayout> layouts =
      all_layouts(parse({"--vocab", "256", "--microbatches", "8", "--plan-layouts"}), 4, flop_cost_rates());
  int compared = 0;
  for (const RankedLayout& sp : layouts) {
    if (!sp.options.sequence_parallel) continue;
    EXPECT_GT(sp.tp, 1);
    for (RankedLayout plain : layouts) {
      if (plain.options.sequence_parallel || plain.options.schedule != sp.options.schedule || plain.v != sp.v) continue;
      plain.options.sequence_parallel = true;  // to compare the rest
      if (!same_layout_but_schedule(plain, sp)) continue;
      ++compared;
      EXPECT_LT(sp.peak, plain.peak) << sp.options.schedule << " at tp " << sp.tp;
      EXPECT_GT(sp.step, plain.step) << sp.options.schedule << " at tp " << sp.tp;
    }
  }
  EXPECT_GT(compared, 0);
  RankedLayout best = layouts.front();
  best.options.sequence_parallel = true;
  EXPECT_NE(layout_command(best, {"--sequence-parallel"}, 4).find(" --sequence-parallel"), std::string::npos);
}

// Without a cost for the tp all-reduces, tp's FLOPs per rank (a tp-th) would tie dp's, and its
// smaller plan would always pick the largest tp; with the stated cost (a byte as 1000 FLOPs), the
// default model's (C = 128) all-reduces outweigh what tp saves, and the best keeps tp 1.
TEST(LayoutAdvisor, TheAllReducesCostKeepsASmallModelOffTheLargestTp) {
  const TrainOptions options = parse({"--vocab", "256", "--microbatches", "8", "--plan-layouts"});
  CostRates free_all_reduces = flop_cost_rates();
  free_all_reduces.tp_byte = 0;
  EXPECT_EQ(all_layouts(options, 4, free_all_reduces).front().tp, 4);
  const std::vector<RankedLayout> layouts = all_layouts(options, 4, flop_cost_rates());
  EXPECT_EQ(layouts.front().tp, 1);
  EXPECT_NE(std::find_if(layouts.begin(), layouts.end(), [](const RankedLayout& l) { return l.tp == 4; }),
            layouts.end());
}

}  // namespace
