// The train program under `mpirun -np 4` with a layout that cannot run: every rank finds the
// problem by itself before any communication, world rank 0 prints the one line (a schedule
// file's error: the line and the grid with the step marked), and every rank exits with status 1
// (a hang would hit the time limit, status 124); --pipeline-layout's split in --print-schedule.
// And the program in bf16: four stages give the single process's losses bitwise. The limit only tells a hang from a run, so it is far above
// any run's time on a loaded machine: 30 s was within reach of 4 ranks under the stream delay
// (tools/run_tests.sh) on 2 busy cores; a hang still ends there, and the runner's own limit
// for unit_tests (600 s) still holds the whole binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/file_tools.h"

namespace {

struct Outcome {
  int status;  // the exit status of mpirun, or -1 when it did not exit
  std::string out, err;
};

const std::string kHangLimit = "timeout 300 ";

Outcome run_train(const std::string& arguments) {
  TempDir dir;
  const std::string command = kHangLimit + "mpirun -np 4 ./train " + arguments + " > " + dir.file("out.txt") +
                              " 2> " + dir.file("err.txt");
  const int status = std::system(command.c_str());
  const std::vector<char> out = read_bytes(dir.file("out.txt")), err = read_bytes(dir.file("err.txt"));
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, {out.begin(), out.end()}, {err.begin(), err.end()}};
}

void expect_layout_error(const std::string& arguments, const std::string& message) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const Outcome outcome = run_train(arguments);
  EXPECT_EQ(outcome.status, 1) << arguments;
  EXPECT_EQ(outcome.err, "train: error: " + message + "\n") << arguments;
  EXPECT_EQ(outcome.out, "") << arguments;
}

}  // namespace

TEST(TrainLayout, DpTimesPpOtherThanTheWorldSizeFailsOnEveryRank) {
  expect_layout_error("--dp 2 --pp 3", "--dp 2 x --pp 3 = 6 does not equal the world size 4");
  expect_layout_error("--dp 3", "--dp 3 does not divide the world size 4");
}

TEST(TrainLayout, FewerLayersThanStagesTimesChunksFailsOnEveryRank) {
  expect_layout_error("--layers 3",
                      "--layers 3 is fewer than --pp 4 x --virtual-stages 1 = 4 pipeline chunks (each needs at least "
                      "one layer)");
  expect_layout_error("--schedule interleaved --virtual-stages 2",
                      "--layers 4 is fewer than --pp 4 x --virtual-stages 2 = 8 pipeline chunks (each needs at least "
                      "one layer)");
}

TEST(TrainLayout, InterleavedMicrobatchesThatLeaveAShortLastGroupFailOnEveryRank) {
  expect_layout_error("--schedule interleaved --virtual-stages 2 --layers 8 --microbatches 6",
                      "--microbatches 6 leaves a last group of 2 after groups of --microbatch-group 4, fewer than "
                      "--pp 4 (the pipeline would wait in dependency bubbles): use --microbatch-group 6, or "
                      "--microbatches 4 or 8");
  expect_layout_error("--schedule interleaved --virtual-stages 2 --layers 8 --microbatches 2",
                      "the interleaved schedule needs --microbatches at least --pp 4; got 2: use 4 or more");
}

// The asynchronous pipeline (issue 37): a rule the schedule refuses, found by every rank in the
// --print-schedule report and in a run, and clipping without vertical sync.
TEST(TrainLayout, PipeDreamRefusalsFailOnEveryRank) {
  expect_layout_error("--schedule pipedream --print-schedule --grad-clip 0 --update-every 3",
                      "--update-every 3 must divide --microbatches 4 (an update may not straddle the end of a step, "
                      "where checkpoints are written)");
  expect_layout_error("--schedule pipedream --grad-clip 0 --update-every 3",
                      "--update-every 3 must divide --microbatches 4 (an update may not straddle the end of a step, "
                      "where checkpoints are written)");
  expect_layout_error("--schedule pipedream",
                      "--schedule pipedream clips the global gradient norm only with --vertical-sync (without it a "
                      "stage would wait for stage 0 at every update): add --vertical-sync or --grad-clip 0");
}

TEST(TrainLayout, UnknownScheduleFailsOnEveryRank) {
  expect_layout_error("--schedule zigzag",
                      "--schedule zigzag is not one of afab|1f1b|interleaved|zb-h1|zb-h2|zb-v|v-half|v-min|looped-bfs|zb-interleaved|dualpipev|pipedream");
}

TEST(TrainLayout, ZeroBubbleVWithFewerLayersThanChunksFailsOnEveryRank) {
  expect_layout_error("--schedule zb-v",
                      "--schedule zb-v runs 2 chunks per stage: --layers 4 is fewer than 2 x --pp 4 = 8 pipeline "
                      "chunks (each needs at least one layer)");
}

// A schedule file that misses a W, and one whose orders wait for each other (stage 0 waits for
// I0's gradient before it sends F1, which stage 1 needs before its I0): the grid with the step
// marked, exit 1 on every rank.
TEST(TrainLayout, ScheduleFileWithAMissingWOrADeadlockFailsOnEveryRank) {
  TempDir dir;
  const std::string missing = dir.file("missing_w.txt"), deadlock = dir.file("deadlock.txt");
  const std::string good = "stage 2 | F0 I0 F1 I1 W0 W1\nstage 3 | F0 I0 F1 I1 W0 W1\n";
  const std::string missing_text = "stage 0 | F0 F1 I0 W0 I1 W1\nstage 1 | F0 I0 F1 I1 W0\n" + good;
  const std::string deadlock_text = "stage 0 | F0 I0 F1 W0 I1 W1\nstage 1 | F0 F1 I0 I1 W0 W1\n" + good;
  write_bytes(missing, {missing_text.begin(), missing_text.end()});
  write_bytes(deadlock, {deadlock_text.begin(), deadlock_text.end()});
  expect_layout_error("--microbatches 2 --schedule-file " + missing,
                      "--schedule-file " + missing +
                          ": schedule error: stage 1 step 3 has no W1 after I1: every microbatch's F, then B or I "
                          "then W, exactly once per chunk\n"
                          "stage 0 | F0   F1   I0   W0   I1   W1\n"
                          "stage 1 | F0   I0   F1   >I1< W0\n"
                          "stage 2 | F0   I0   F1   I1   W0   W1\n"
                          "stage 3 | F0   I0   F1   I1   W0   W1");
  expect_layout_error("--microbatches 2 --schedule-file " + deadlock,
                      "--schedule-file " + deadlock +
                          ": schedule error: deadlock:\n"
                          "stage 0 waits at step 1 (I0) for the gradient of microbatch 0 from stage 1 chunk 0\n"
                          "stage 1 waits at step 1 (F1) for the activation of microbatch 1 from stage 0 chunk 0\n"
                          "stage 2 waits at step 2 (F1) for the activation of microbatch 1 from stage 1 chunk 0\n"
                          "stage 3 waits at step 2 (F1) for the activation of microbatch 1 from stage 2 chunk 0\n"
                          "stage 0 | F0   >I0< F1   W0   I1   W1\n"
                          "stage 1 | F0   >F1< I0   I1   W0   W1\n"
                          "stage 2 | F0   I0   >F1< I1   W0   W1\n"
                          "stage 3 | F0   I0   >F1< I1   W0   W1");
}

TEST(TrainLayout, LayersPerStageThatDoNotFitFailOnEveryRank) {
  expect_layout_error("--layers-per-stage 1,1,1",
                      "--layers-per-stage 1,1,1 has 3 entries; it needs one per chunk, --pp 4 x --virtual-stages 1 = 4");
  expect_layout_error("--layers-per-stage 1,1,1,2",
                      "--layers-per-stage 1,1,1,2 adds up to 5 layers, but the model has --layers 4");
}

// The string is parsed and fitted to the run once the schedule is known (check_layout); each
// rank finds the problem before any communication.
TEST(TrainLayout, PipelineLayoutThatDoesNotFitFailsOnEveryRank) {
  expect_layout_error("--pipeline-layout 't|EtL'",
                      "--pipeline-layout: column 3: E must open the first virtual stage (the embedding runs there)");
  expect_layout_error("--pipeline-layout 'Et|t|tL'",
                      "--pipeline-layout: column 8: 3 virtual stages, but the schedule runs --pp 4 x 1 chunks = 4");
  expect_layout_error("--pipeline-layout 'Et|t|t|ttL'",
                      "--pipeline-layout: column 9: 5 transformer layers, but the model has --layers 4");
}

// The split --print-schedule reports is the string's, layer-less first and last stages included,
// and its header repeats the string.
TEST(TrainLayout, PrintScheduleFollowsThePipelineLayout) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const Outcome outcome = run_train("--print-schedule --pipeline-layout 'E|tt|tt|L'");
  EXPECT_EQ(outcome.status, 0) << outcome.err;
  EXPECT_EQ(outcome.out.substr(0, outcome.out.find('\n')), "1f1b schedule, p = 4, m = 4, v = 1, layout E|tt|tt|L");
  for (const char* layers : {"(layers [0, 0) + embedding)\n", "(layers [0, 2))\n", "(layers [2, 4))\n",
                             "(layers [4, 4) + head)\n"})
    EXPECT_NE(outcome.out.find(layers), std::string::npos) << layers << " in\n" << outcome.out;
}

// --print-schedule of zb-h1 with p = 4, m = 8: the paper's grid, its idle share 3/27 at equal
// costs (1F1B's is 9/33), the weight buffers waiting for their W on the last stage (sized for the
// materialised attention, named); and fed back as a schedule file, the same report.
TEST(TrainLayout, PrintScheduleShowsZeroBubbleH1AndReadsItBackFromAFile) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const Outcome outcome = run_train("--print-schedule --attention materialized --microbatches 8 --schedule zb-h1");
  EXPECT_EQ(outcome.status, 0);
  EXPECT_NE(outcome.out.find("stage 3 | F0 I0 F1 I1 F2 I2 F3 I3 W0 F4"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("stage 0: idle 0.111, peak 4 in flight"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("stage 3: idle 0.111, peak 1 in flight x 6830336 B + 4 awaiting W"), std::string::npos)
      << outcome.out;
  TempDir dir;
  const size_t grid_begin = outcome.out.find("stage 0 |"), grid_end = outcome.out.find("\n\n", grid_begin);
  const std::string grid = outcome.out.substr(grid_begin, grid_end - grid_begin + 1);
  write_bytes(dir.file("zb-h1.txt"), {grid.begin(), grid.end()});
  const Outcome again = run_train("--print-schedule --attention materialized --microbatches 8 --schedule-file " +
                                    dir.file("zb-h1.txt"));
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.out.substr(again.out.find('\n')), outcome.out.substr(outcome.out.find('\n')))
      << "the same report but for its first line, which names the file";
}

// --print-schedule is no error: rank 0 prints the grid and every rank exits 0.
TEST(TrainLayout, PrintScheduleExitsZeroOnEveryRank) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const Outcome outcome = run_train("--print-schedule --microbatches 8");
  EXPECT_EQ(outcome.status, 0);
  EXPECT_NE(outcome.out.find("stage 3 | F0 B0 F1 B1"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("stage 0: idle 0.273"), std::string::npos) << outcome.out;
  EXPECT_EQ(outcome.err, "");
}

// The lines of a --log file that hold the losses and norms: each step's "loss" to "grad_norm"
// (the time and the stages' idle shares differ from run to run).
std::vector<std::string> loss_fields(const std::string& log) {
  const std::vector<char> bytes = read_bytes(log);
  const std::string text(bytes.begin(), bytes.end());
  std::vector<std::string> fields;
  for (size_t at = text.find("\"loss\""); at != std::string::npos; at = text.find("\"loss\"", at + 1))
    fields.push_back(text.substr(at, text.find(", \"ms\"", at) - at));
  return fields;
}

// The loss fields of ./train OPTIONS --log FILE as one process (first) and under mpirun -np 4
// (4 stages, 1F1B), and the 4-rank run's standard output.
struct BothRuns {
  std::vector<std::string> single, four;
  std::string four_out;
};
BothRuns single_and_four_stages(const std::string& options) {
  TempDir dir;
  const int single = std::system((kHangLimit + "./train" + options + " --log " + dir.file("one.jsonl") +
                                  " > /dev/null").c_str());
  EXPECT_TRUE(WIFEXITED(single) && WEXITSTATUS(single) == 0);
  const Outcome four = run_train(options + " --log " + dir.file("four.jsonl"));
  EXPECT_EQ(four.status, 0) << four.err;
  return {loss_fields(dir.file("one.jsonl")), loss_fields(dir.file("four.jsonl")), four.out};
}

const std::string kSmallRun = " --layers 4 --heads 2 --dim 32 --seq-len 16 --batch 2 --steps 4 --val-every 2 "
                              "--val-batches 2 --sample-every 0";

// The whole program in bf16, from the options to the step line: mpirun -np 4 ./train --dtype bf16
// (4 stages, 1F1B, bf16 messages) gives bitwise the losses, validation losses and norms of
// ./train --dtype bf16, and says it runs in bf16, with the stages' line. Both with --zero 1, which
// with one replica has nothing to shard: a note on the pipeline line, and the same losses.
TEST(TrainLayout, Bf16FourStagesGiveTheSingleProcessLosses) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const BothRuns runs = single_and_four_stages(" --dtype bf16 --zero 1" + kSmallRun);
  ASSERT_EQ(runs.single.size(), 4u);
  EXPECT_NE(runs.single[1].find("val_loss"), std::string::npos);
  EXPECT_EQ(runs.four, runs.single);
  EXPECT_NE(runs.four_out.find("precision: bf16 parameters"), std::string::npos) << runs.four_out;
  EXPECT_NE(runs.four_out.find("stages | 0: idle"), std::string::npos) << runs.four_out;
  EXPECT_NE(runs.four_out.find("recompute off; note: --zero 1 with dp=1 has nothing to shard: runs as --zero 0\n"),
            std::string::npos)
      << runs.four_out;
}

// fp32 as ./train runs it by default, its GEMMs in TF32 (kernels/gemm.cuh): the layout does not
// change the mathematics either, and --no-tf32's full fp32 is another run (in the last bits).
TEST(TrainLayout, Tf32FourStagesGiveTheSingleProcessLossesAndFullFp32Differs) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const BothRuns tf32 = single_and_four_stages(kSmallRun);
  ASSERT_EQ(tf32.single.size(), 4u);
  EXPECT_EQ(tf32.four, tf32.single);
  const BothRuns fp32 = single_and_four_stages(" --no-tf32" + kSmallRun);
  EXPECT_EQ(fp32.four, fp32.single);
  EXPECT_NE(fp32.single, tf32.single);
}


// The value of each field's "loss" (the step's training loss).
std::vector<double> losses_of(const std::vector<std::string>& fields) {
  std::vector<double> losses;
  for (const std::string& field : fields) losses.push_back(std::stod(field.substr(field.find(':') + 1)));
  return losses;
}

// The fused attention through the whole program (./train's default, named here all the same):
// 4 stages with recompute give bitwise the single process's losses and norms, the banner names
// it, and its losses are --attention materialized's within 1e-5 relative. Default fp32 runs the materialised attention's GEMMs in TF32
// (inputs rounded to 2^-11) and the fused kernel's dot products in full fp32: the scores differ by
// 2^-11 of themselves, a few 1e-4 here at initialisation, which moves the loss of 5.5 by a few
// 1e-7 (measured 2026-11-27: 2e-7, 5e-8, 3.8e-7, 4.6e-7 at steps 1 to 4); the bound is 20 times
// that. (The model-level faults are caught by GPTFusedAttention.*, not here.)
TEST(TrainLayout, FusedAttentionFourStagesGiveTheSingleProcessLosses) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const BothRuns fused = single_and_four_stages(" --attention fused --recompute" + kSmallRun);
  ASSERT_EQ(fused.single.size(), 4u);
  EXPECT_EQ(fused.four, fused.single);
  EXPECT_NE(fused.four_out.find(", attention fused\n"), std::string::npos) << fused.four_out;
  const BothRuns materialized = single_and_four_stages(" --attention materialized" + kSmallRun);
  EXPECT_NE(materialized.four_out.find(", attention materialized\n"), std::string::npos) << materialized.four_out;
  const std::vector<double> a = losses_of(fused.single), b = losses_of(materialized.single);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * b[i]) << "step " << i + 1;
}


// --schedule pipedream from the command line (issue 37). One stage updating once a step
// (--update-every m) is the synchronous trainer to the bit: with p = 1 every forward and backward of
// a step uses the version before the step's one update (pipeline/pipedream.h's rule), so the
// losses are ./train's without it. The log has no norm: pipedream computes none.
TEST(TrainLayout, PipeDreamOnOneStageUpdatingOnceAStepIsTheSynchronousTrainer) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const std::string options = kSmallRun + " --val-every 0 --grad-clip 0 --log ";
  const std::string pipedream = " --schedule pipedream --update-every 4";
  for (const std::string& run : {options + dir.file("sync.jsonl"), pipedream + options + dir.file("async.jsonl")}) {
    const int status = std::system((kHangLimit + "./train" + run + " > /dev/null").c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << run;
  }
  const std::vector<std::string> sync = loss_fields(dir.file("sync.jsonl"));
  const std::vector<std::string> async = loss_fields(dir.file("async.jsonl"));
  ASSERT_EQ(sync.size(), 4u);
  EXPECT_EQ(losses_of(async), losses_of(sync));
  for (const std::string& field : async) EXPECT_EQ(field.find("grad_norm"), std::string::npos) << field;
}

// A small pipedream run of 8 steps with `layout`'s flags beside the same synchronous run: it trains,
// the losses finite and falling by more than 0.3, and its step 1 the synchronous run's to the bit
// (the learning rate is 0 at step 1, so no update of the warm-up moves a weight, whatever version a
// forward takes). `banner` is the start-up line naming its mesh. Returns the run and its log's fields.
std::pair<Outcome, std::vector<std::string>> expect_pipedream_trains(const TempDir& dir, const std::string& layout,
                                                                     const std::string& banner) {
  const std::string options = layout + " --layers 4 --heads 2 --dim 32 --seq-len 16 --batch 2 --steps 8 "
                                       "--sample-every 0 --grad-clip 0 --log ";
  const Outcome async = run_train("--schedule pipedream" + options + dir.file("async.jsonl"));
  EXPECT_EQ(async.status, 0) << async.err;
  const Outcome sync = run_train(options + dir.file("sync.jsonl"));
  EXPECT_EQ(sync.status, 0) << sync.err;
  const std::vector<std::string> fields = loss_fields(dir.file("async.jsonl"));
  const std::vector<double> losses = losses_of(fields), sync_losses = losses_of(loss_fields(dir.file("sync.jsonl")));
  EXPECT_EQ(losses.size(), 8u);
  if (losses.size() == 8 && !sync_losses.empty()) {
    EXPECT_EQ(losses[0], sync_losses[0]);
    EXPECT_LT(losses[7], losses[0] - 0.3);
  }
  for (double loss : losses) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NE(async.out.find(banner), std::string::npos) << async.out;
  return {async, fields};
}

// Four stages, an update after every backward: the run trains, each stage's line printed, and
// validates at steps 4 and 8 only, where --val-every 4 drains the pipeline (one weight version). Over 8 steps the loss falls by 0.57
// (2026-11-28).
TEST(TrainLayout, PipeDreamFourStagesTrainAndValidateAtEachDrain) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const auto [async, fields] =
      expect_pipedream_trains(dir, " --val-every 4 --val-batches 2", "pipeline: dp=1 x pp=4, pipedream schedule");
  for (size_t i = 0; i < fields.size(); ++i)
    EXPECT_EQ(fields[i].find("val_loss") != std::string::npos, i == 3 || i == 7) << fields[i];
  EXPECT_NE(async.out.find("  stages | 0: idle"), std::string::npos) << async.out;
}

// Two replicas of two stages (issue 37 item 2): ./train runs them; step 1 is the synchronous dp 2 x
// pp 2 run's to the bit (both sum the same m dp microbatch means).
TEST(TrainLayout, PipeDreamTwoReplicasOfTwoStagesTrain) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  expect_pipedream_trains(dir, " --dp 2 --pp 2 --val-every 0", "pipeline: dp=2 x pp=2, pipedream schedule");
}
