// The train program under `mpirun -np 4` with a layout that cannot run: every rank finds the
// problem by itself before any communication, world rank 0 prints the one line, and every rank
// exits with status 1 at once (a hang would hit the 30 s timeout, status 124). And the program
// in bf16: four stages give the single process's losses bitwise.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/file_tools.h"

namespace {

struct Outcome {
  int status;  // the exit status of mpirun, or -1 when it did not exit
  std::string out, err;
};

Outcome run_train(const std::string& arguments) {
  TempDir dir;
  const std::string command = "timeout 30 mpirun -np 4 ./train " + arguments + " > " + dir.file("out.txt") +
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

TEST(TrainLayout, InterleavedMicrobatchesNotAMultipleOfTheStagesFailOnEveryRank) {
  expect_layout_error("--schedule interleaved --virtual-stages 2 --layers 8 --microbatches 6",
                      "the interleaved schedule needs --microbatches to be a multiple of --pp 4 and at least 4; got 6: "
                      "use 4 or 8");
  expect_layout_error("--schedule interleaved --virtual-stages 2 --layers 8 --microbatches 2",
                      "the interleaved schedule needs --microbatches to be a multiple of --pp 4 and at least 4; got 2: "
                      "use 4");
}

TEST(TrainLayout, UnknownScheduleFailsOnEveryRank) {
  expect_layout_error("--schedule zigzag", "--schedule zigzag is not one of afab|1f1b|interleaved");
}

TEST(TrainLayout, LayersPerStageThatDoNotFitFailOnEveryRank) {
  expect_layout_error("--layers-per-stage 1,1,1",
                      "--layers-per-stage 1,1,1 has 3 entries; it needs one per chunk, --pp 4 x --virtual-stages 1 = 4");
  expect_layout_error("--layers-per-stage 1,1,1,2",
                      "--layers-per-stage 1,1,1,2 adds up to 5 layers, but the model has --layers 4");
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

// The whole program in bf16, from the options to the step line: mpirun -np 4 ./train --dtype bf16
// (4 stages, 1F1B, bf16 messages) gives bitwise the losses, validation losses and norms of
// ./train --dtype bf16, and says it runs in bf16, with the stages' line.
TEST(TrainLayout, Bf16FourStagesGiveTheSingleProcessLosses) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const std::string options = " --dtype bf16 --layers 4 --heads 2 --dim 32 --seq-len 16 --batch 2 --steps 4 "
                              "--val-every 2 --val-batches 2 --sample-every 0 --log ";
  const int single = std::system(("timeout 30 ./train" + options + dir.file("one.jsonl") + " > /dev/null").c_str());
  ASSERT_TRUE(WIFEXITED(single) && WEXITSTATUS(single) == 0);
  const Outcome four = run_train(options + dir.file("four.jsonl"));
  ASSERT_EQ(four.status, 0) << four.err;
  const std::vector<std::string> expected = loss_fields(dir.file("one.jsonl"));
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_NE(expected[1].find("val_loss"), std::string::npos);
  EXPECT_EQ(loss_fields(dir.file("four.jsonl")), expected);
  EXPECT_NE(four.out.find("precision: bf16 parameters"), std::string::npos) << four.out;
  EXPECT_NE(four.out.find("stages | 0: idle"), std::string::npos) << four.out;
}
