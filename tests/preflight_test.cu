// What a run needs after its first step is checked before it (trainer/safety/preflight.h): each bad
// setting makes prepare_run throw one line naming the option, so nothing has been trained yet.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/file_tools.h"
#include "tests/tiny_run.h"
#include "trainer/program/run.h"

namespace {

void write_text(const std::string& path, size_t bytes) {
  std::vector<char> text(bytes);
  for (size_t i = 0; i < bytes; ++i) text[i] = "in the beginning\n"[i % 17];
  write_bytes(path, text);
}

// The tiny run, 3 steps, on 4 kB of text.
TrainOptions tiny_options(const TempDir& dir) {
  write_text(dir.file("text.txt"), 4000);
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.steps = 3;
  return options;
}

std::string prepare_error(const TrainOptions& options) {
  return error_of([&] { prepare_run(options); });
}

}  // namespace

TEST(Preflight, SaveIntoAMissingDirectoryFails) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  options.save = "/no/such/dir/x.bin";
  EXPECT_EQ(prepare_error(options), "--save /no/such/dir/x.bin: cannot write in /no/such/dir: No such file or directory");
}

// A file where the directory should be: unwritable even for root.
TEST(Preflight, SaveUnderAFileFails) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  options.save = dir.file("text.txt") + "/x.bin";
  EXPECT_EQ(prepare_error(options),
            "--save " + options.save + ": cannot write in " + dir.file("text.txt") + ": Not a directory");
}

TEST(Preflight, WritableSaveAndLogDirectoriesPassAndTheProbeLeavesNothing) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  options.save = dir.file("x.bin");
  options.log = dir.file("log.jsonl");
  EXPECT_EQ(prepare_error(options), "(no error)");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"text.txt"});
}

TEST(Preflight, LogIntoAMissingDirectoryFails) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  options.log = dir.file("missing/log.jsonl");
  EXPECT_EQ(prepare_error(options), "--log " + options.log + ": cannot write in " + dir.file("missing") +
                                        ": No such file or directory");
}

// B*T+1 = 33 tokens make one microbatch; 20 do not.
TEST(Preflight, ValidationDataShorterThanAMicrobatchFailsWhenValidationRuns) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  write_text(dir.file("val.txt"), 20);
  options.val_data = dir.file("val.txt");
  options.val_every = 5;
  EXPECT_EQ(prepare_error(options), "--val-every 5: " + dir.file("val.txt") +
                                        " holds 20 tokens, fewer than one microbatch reads (B*T+1 = 33)");
  options.val_every = 0;
  EXPECT_EQ(prepare_error(options), "(no error)");
}

TEST(Preflight, TrainingDataShorterThanAMicrobatchFails) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  write_text(dir.file("short.txt"), 32);
  options.train_data = dir.file("short.txt");
  options.val_data = dir.file("text.txt");
  EXPECT_EQ(prepare_error(options), "training data: " + dir.file("short.txt") +
                                        " holds 32 tokens, fewer than one microbatch reads (B*T+1 = 33)");
}

TEST(Preflight, SamplesOfByteTextNeedAVocabularyOf256) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  options.vocab = 300;
  options.sample_every = 10;
  EXPECT_EQ(prepare_error(options), "--sample-every 10: byte text decodes 256 tokens, but the model's vocabulary "
                                    "has 300 (use a vocabulary of 256 or a tokenizer file)");
}

TEST(Preflight, TokenizerFileThatDoesNotReadFails) {
  TempDir dir;
  TrainOptions options = tiny_options(dir);
  options.tokenizer = dir.file("missing_tokenizer.bin");
  const std::string error = prepare_error(options);
  EXPECT_NE(error.find(options.tokenizer), std::string::npos) << error;
}

// The command of issue 14: the run ends at once with status 1 and the one line, before any step.
TEST(Preflight, ProgramWithAnUnwritableSaveFailsAtOnceInOneLine) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  write_text(dir.file("text.txt"), 4000);
  const std::string command = "./train --steps 3 --train-data " + dir.file("text.txt") +
                              " --save /no/such/dir/x.bin > " + dir.file("out.txt") + " 2> " + dir.file("err.txt");
  const auto begin = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();

  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const std::vector<char> err = read_bytes(dir.file("err.txt"));
  EXPECT_EQ(std::string(err.begin(), err.end()),
            "train: error: --save /no/such/dir/x.bin: cannot write in /no/such/dir: No such file or directory\n");
  EXPECT_TRUE(read_bytes(dir.file("out.txt")).empty());
  EXPECT_LT(seconds, 10.0);  // the default run's first step alone takes longer than that here
}

// Sizes that pass every check can still exceed host memory (a 2e9-token context): one line and
// status 1, not std::terminate's abort (status 134).
TEST(Preflight, ProgramAskingForMoreHostMemoryThanThereIsFailsInOneLine) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const std::string command = "./train --steps 1 --seq-len 2000000000 > " + dir.file("out.txt") + " 2> " +
                              dir.file("err.txt");
  const int status = std::system(command.c_str());

  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const std::vector<char> err = read_bytes(dir.file("err.txt"));
  EXPECT_EQ(std::string(err.begin(), err.end()),
            "train: error: out of host memory while setting up the run: the model or data sizes are too large "
            "for this machine\n");
}
