// The options of PipeDream's asynchronous pipeline (trainer/command_line/pipedream_options.h)
// refused in one line: the rule's options without the schedule, values out of range, clipping
// without vertical sync, what pipedream does not run with yet, and clipping in a run (the rule's
// own errors: tests/pipedream_report_test.cu). Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/options_parsing.h"

namespace {

// pipedream's --print-schedule with clipping off: the options every refusal below adds one to.
std::vector<std::string> pipedream(std::vector<std::string> more) {
  std::vector<std::string> arguments = {"--schedule", "pipedream", "--print-schedule", "--grad-clip", "0"};
  arguments.insert(arguments.end(), more.begin(), more.end());
  return arguments;
}

}  // namespace

TEST(PipeDreamOptions, AreTakenWithThePrintedSchedule) {
  const TrainOptions options = parse(pipedream({"--update-every", "2", "--weight-stashing", "off"}));
  EXPECT_EQ(options.update_every, 2);
  EXPECT_EQ(options.weight_stashing, "off");
  EXPECT_FALSE(options.vertical_sync);
  EXPECT_TRUE(parse({"--schedule", "pipedream", "--print-schedule", "--vertical-sync"}).vertical_sync);
}

TEST(PipeDreamOptions, RuleOptionsNeedThePipeDreamSchedule) {
  EXPECT_EQ(error_of({"--update-every", "2"}), "--update-every needs --schedule pipedream");
  EXPECT_EQ(error_of({"--weight-stashing", "off"}), "--weight-stashing needs --schedule pipedream");
  EXPECT_EQ(error_of({"--schedule", "zb-h1", "--vertical-sync"}), "--vertical-sync needs --schedule pipedream");
}

TEST(PipeDreamOptions, BadValuesAreRefusedInOneLine) {
  EXPECT_EQ(error_of(pipedream({"--update-every", "0"})), "--update-every 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of(pipedream({"--weight-stashing", "maybe"})), "--weight-stashing maybe is not one of on|off");
  EXPECT_EQ(error_of({"--schedule", "pipedream", "--print-schedule"}),
            "--schedule pipedream clips the global gradient norm only with --vertical-sync (without it a stage "
            "would wait for stage 0 at every update): add --vertical-sync or --grad-clip 0");
}

TEST(PipeDreamOptions, WhatIsNotBuiltYetIsRefusedByName) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tp", "2"}, "--tp 2"},
      {{"--zero", "1"}, "--zero 1"}};
  for (const auto& [more, option] : cases)
    EXPECT_EQ(error_of(pipedream(more)), "--schedule pipedream does not run with " + option + " yet (issue 37)");
}

// --recompute is taken with stashing (the default, and with vertical sync), and refused without it:
// the forward's version would be gone when its activations are recomputed.
TEST(PipeDreamOptions, RecomputeIsTakenWithStashingOnly) {
  EXPECT_TRUE(parse(pipedream({"--recompute"})).recompute);
  EXPECT_TRUE(parse(pipedream({"--recompute", "--vertical-sync"})).recompute);
  EXPECT_EQ(error_of(pipedream({"--recompute", "--weight-stashing", "off"})),
            "--schedule pipedream with --recompute needs weight stashing (without it the forward's weight version is "
            "gone when its activations are recomputed): drop --weight-stashing off or --recompute");
}

// Microbatches of different lengths are taken: documents and the warm-up's caps
// (tests/mpi/pipedream_lengths_test.cu holds them to the reference).
TEST(PipeDreamOptions, DocumentsAndSeqLenWarmupAreTaken) {
  EXPECT_TRUE(parse({"--schedule", "pipedream", "--grad-clip", "0", "--documents"}).documents);
  EXPECT_EQ(parse({"--schedule", "pipedream", "--grad-clip", "0", "--seq-len-warmup", "10"}).seq_len_warmup, 10);
}

// A checkpoint every N steps is taken: the pipeline drains at each (docs/pipeline.md, "Checkpoints").
TEST(PipeDreamOptions, SaveEveryIsTaken) {
  EXPECT_EQ(parse({"--schedule", "pipedream", "--grad-clip", "0", "--save", "m.bin", "--save-every", "2"}).save_every, 2);
}

// The predicted timeline of --print-schedule is built (pipeline/pipedream_timeline.h).
TEST(PipeDreamOptions, PrintScheduleTakesTrace) {
  EXPECT_EQ(parse({"--schedule", "pipedream", "--grad-clip", "0", "--print-schedule", "--trace", "t.json"}).trace,
            "t.json");
}

// The split balanced by measured costs (trainer/program/auto_layer_split.h) is taken.
TEST(PipeDreamOptions, LayersPerStageAutoIsTaken) {
  EXPECT_TRUE(parse({"--schedule", "pipedream", "--grad-clip", "0", "--layers-per-stage", "auto"}).layers_per_stage_auto);
}

// Replicas are taken: each runs its own pipeline, each update summed over them.
TEST(PipeDreamOptions, ReplicasAreTaken) {
  EXPECT_EQ(parse({"--schedule", "pipedream", "--grad-clip", "0", "--dp", "2"}).dp, 2);
}

// A run takes the rule without clipping, and with vertical sync with the default --grad-clip.
TEST(PipeDreamOptions, RunWithoutClippingAndClippingWithVerticalSyncAreTaken) {
  const TrainOptions options = parse({"--schedule", "pipedream", "--grad-clip", "0", "--update-every", "2"});
  EXPECT_EQ(options.schedule, "pipedream");
  EXPECT_EQ(options.update_every, 2);
  const TrainOptions clipped = parse({"--schedule", "pipedream", "--vertical-sync"});
  EXPECT_TRUE(clipped.vertical_sync);
  EXPECT_GT(clipped.grad_clip, 0.0f);
}
