// ./train --tp under `mpirun -np 4` (issue 33; the default model at dp 2 x tp 2 x pp 2 under
// `mpirun -np 8`): a bad --tp fails on every rank with one line
// before anything is allocated; the start-up line shows the mesh; and a checkpoint moves between
// tp 2 x pp 2 and one process: the model file written at tp 2 is the one written at tp 1 within
// the tolerance below, and each resumes at the other layout to continue the uninterrupted run
// within it, and the tp 2 x pp 2 file at tp 1 x pp 4 too; and with --zero 1 at dp 2 x tp 2 it
// saves the files of --zero 0; with --sequence-parallel, --documents and a warm-up every length is a
// multiple of tp; --print-schedule and --print-memory show the mesh. (The layouts' losses, gradients and the checkpoint gather's
// placement, bitwise where it can be, are TensorParallelLayouts',
// tests/mpi/tensor_parallel_layouts_test.cu.)
//
// The tolerance. A tp 2 step adds partial sums in another order than one process (docs/pipeline.md,
// "Their tolerance"): the losses differ by about K u relative, K <= Vp = 256, 1.5e-5 in fp32;
// 1e-5 relative is K u for the longest sums the default TF32 GEMMs here have (K = 4 C = 128), and
// the measured differences are 1e-7 (CPU build, 2026-11-27: at most 1.1e-6 in losses near 5.5). The
// parameters after two AdamW steps differ by less: a gradient's rounding moves an update m / sqrt(v)
// by its relative error, except where a gradient near 0 changes sign, which moves the update by up
// to 2 lr; the two steps' learning rates (warm-up: 0, then 1.5e-4) bound that by 3e-4. Measured:
// 1.3e-5. A tp rank's slice lost or placed at another rank's rows is off by the parameters
// themselves (0.02 to 0.09 here).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/file_tools.h"

namespace {

const std::string kHangLimit = "timeout 300 ";
const std::string kRun = " --layers 4 --heads 2 --dim 32 --seq-len 16 --batch 2 --val-every 0 --sample-every 0";
constexpr double kLossTolerance = 1e-5;        // relative
constexpr double kParameterTolerance = 3e-4;  // absolute: two AdamW steps' 2 lr

struct Outcome {
  int status;  // the exit status, or -1 when it did not exit
  std::string out, err;
};

// ./train OPTIONS, as one process (ranks 1) or under mpirun -np ranks.
Outcome train(int ranks, const std::string& options) {
  TempDir dir;
  const std::string program = ranks == 1 ? "./train" : "mpirun -np " + std::to_string(ranks) + " ./train";
  const std::string command =
      kHangLimit + program + options + " > " + dir.file("out.txt") + " 2> " + dir.file("err.txt");
  const int status = std::system(command.c_str());
  const std::vector<char> out = read_bytes(dir.file("out.txt")), err = read_bytes(dir.file("err.txt"));
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, {out.begin(), out.end()}, {err.begin(), err.end()}};
}

// Each step's value of key ("loss", "seq_len") in a --log file.
std::vector<double> values_of(const std::string& log, const std::string& key = "loss") {
  const std::vector<char> bytes = read_bytes(log);
  const std::string text(bytes.begin(), bytes.end());
  const std::string field = "\"" + key + "\": ";
  std::vector<double> values;
  for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at + 1))
    values.push_back(std::stod(text.substr(at + field.size())));
  return values;
}

// The parameters of an llm.c model file (after its 256-int header).
std::vector<float> parameters_of(const std::string& model_file) {
  const std::vector<char> bytes = read_bytes(model_file);
  std::vector<float> values((bytes.size() - 1024) / sizeof(float));
  std::memcpy(values.data(), bytes.data() + 1024, values.size() * sizeof(float));
  return values;
}

void expect_error_on_every_rank(const std::string& options, const std::string& message) {
  const Outcome outcome = train(4, options);
  EXPECT_EQ(outcome.status, 1) << options;
  EXPECT_EQ(outcome.err, "train: error: " + message + "\n") << options;
  EXPECT_EQ(outcome.out, "") << options;
}

}  // namespace

TEST(TrainTensorParallel, BadTpFailsOnEveryRank) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  expect_error_on_every_rank(kRun + " --tp 3", "--dp 1 x --tp 3 = 3 does not divide the world size 4");
  expect_error_on_every_rank(kRun + " --tp 4", "--tp 4 does not divide the 2 attention heads");
}

TEST(TrainTensorParallel, CheckpointMovesBetweenTpTwoAndOneProcess) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const std::string at_tp2 = " --tp 2 --pp 2";
  ASSERT_EQ(train(1, kRun + " --steps 4 --log " + dir.file("whole.jsonl")).status, 0);
  const Outcome saved_tp2 = train(4, kRun + at_tp2 + " --steps 2 --save " + dir.file("tp2.bin"));
  ASSERT_EQ(saved_tp2.status, 0) << saved_tp2.err;
  EXPECT_NE(saved_tp2.out.find("pipeline: dp=1 x tp=2 x pp=2, 1f1b schedule"), std::string::npos) << saved_tp2.out;
  ASSERT_EQ(train(1, kRun + " --steps 2 --save " + dir.file("tp1.bin")).status, 0);

  const std::vector<float> tp2 = parameters_of(dir.file("tp2.bin")), tp1 = parameters_of(dir.file("tp1.bin"));
  ASSERT_EQ(tp2.size(), tp1.size());
  double worst = 0;
  for (size_t i = 0; i < tp1.size(); ++i) worst = std::max(worst, double(std::fabs(tp2[i] - tp1[i])));
  EXPECT_LE(worst, kParameterTolerance) << "the model file written at tp 2 against one process's";

  const Outcome resumed_tp1 = train(1, kRun + " --steps 4 --resume " + dir.file("tp2.bin") + " --log " +
                                           dir.file("resumed_tp1.jsonl"));
  ASSERT_EQ(resumed_tp1.status, 0) << resumed_tp1.err;
  const Outcome resumed_tp2 = train(4, kRun + at_tp2 + " --steps 4 --resume " + dir.file("tp1.bin") + " --log " +
                                           dir.file("resumed_tp2.jsonl"));
  ASSERT_EQ(resumed_tp2.status, 0) << resumed_tp2.err;
  // The issue's move: saved at tp 2 x pp 2, resumed at tp 1 x pp 4 (the middle stages' layers and
  // AdamW moments from the file's whole tensors).
  const Outcome resumed_pp4 = train(4, kRun + " --pp 4 --steps 4 --resume " + dir.file("tp2.bin") + " --log " +
                                           dir.file("resumed_pp4.jsonl"));
  ASSERT_EQ(resumed_pp4.status, 0) << resumed_pp4.err;
  const std::vector<double> whole = values_of(dir.file("whole.jsonl"));
  ASSERT_EQ(whole.size(), 4u);
  for (const std::string log : {"resumed_tp1.jsonl", "resumed_tp2.jsonl", "resumed_pp4.jsonl"}) {
    const std::vector<double> resumed = values_of(dir.file(log));
    ASSERT_EQ(resumed.size(), 2u) << log;
    for (int i = 0; i < 2; ++i)
      EXPECT_NEAR(resumed[i], whole[2 + i], kLossTolerance * whole[2 + i]) << log << ", step " << 3 + i;
  }
}

// ZeRO-1 at dp 2 x tp 2: the model and state files saved after 2 steps are those of --zero 0 byte for
// byte, fp32 and bf16 (the replicas' shards of each tp rank's slices gathered row by row before
// the tp ranks' slices are: trainer/checkpoints/gather_model.cpp).
TEST(TrainTensorParallel, ZeroOneSavesTheFilesOfZeroZero) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  for (const std::string dtype : {"fp32", "bf16"}) {
    const std::string at = kRun + " --dp 2 --tp 2 --steps 2 --dtype " + dtype + " --save ";
    const std::string unsharded = dir.file(dtype + "-zero0.bin"), sharded = dir.file(dtype + "-zero1.bin");
    const Outcome zero0 = train(4, at + unsharded), zero1 = train(4, at + sharded + " --zero 1");
    ASSERT_EQ(zero0.status, 0) << zero0.err;
    ASSERT_EQ(zero1.status, 0) << zero1.err;
    EXPECT_TRUE(read_bytes(sharded) == read_bytes(unsharded)) << dtype << ": the model files differ";
    EXPECT_TRUE(read_bytes(sharded + ".state") == read_bytes(unsharded + ".state"))
        << dtype << ": the state files differ";
  }
}

// The issue's "Done when": `mpirun -np 8 ./train --dp 2 --tp 2 --pp 2` trains the default model
// (L = 4, NH = 4, C = 128, T = 64, 4 microbatches of B = 8 a replica; 1.6 to 1.8 s a step on 2
// shared cores, 7 s in all): the start-up line shows the mesh, the first loss is a random model's,
// within 0.25 of ln 256 = 5.545 (the byte vocabulary), and after the warm-up's first steps
// (learning rates 0, 1.5e-4, 3e-4) the third is more than 0.1 below it (measured 5.623, 5.615,
// 5.314 on 2026-11-27).
TEST(TrainTensorParallel, DefaultModelTrainsOnDpTwoTpTwoPpTwo) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const Outcome run = train(8, " --dp 2 --tp 2 --pp 2 --steps 3 --val-every 0 --sample-every 0 --log " +
                                   dir.file("log.jsonl"));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("pipeline: dp=2 x tp=2 x pp=2, 1f1b schedule"), std::string::npos) << run.out;
  const std::vector<double> losses = values_of(dir.file("log.jsonl"));
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_NEAR(losses[0], std::log(256.0), 0.25) << "not a random model's loss over 256 tokens";
  EXPECT_LT(losses[2], losses[0] - 0.1) << "the loss does not fall: " << losses[0] << " then " << losses[2];
}

// --sequence-parallel with --documents and a warm-up from an odd start (issue 33 item 5): every
// length rounded up to a multiple of tp, as the start-up lines say; the warm-up's T (5 + 11 s / 4
// rounded down to a multiple of 8, never below 5) of 5, 5, 8 runs as 6, 6, 8.
TEST(TrainTensorParallel, SequenceParallelRoundsVariableLengthsUpToTp) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  const Outcome run = train(4, kRun + " --tp 2 --pp 2 --sequence-parallel --documents --seq-len-warmup 4 "
                                      "--seq-len-warmup-start 5 --steps 3 --log " + dir.file("log.jsonl"));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("each microbatch at the T of its longest, rounded up to a multiple of tp = 2"),
            std::string::npos) << run.out;
  EXPECT_NE(run.out.find("in multiples of 8, rounded up to a multiple of tp = 2"), std::string::npos) << run.out;
  EXPECT_EQ(values_of(dir.file("log.jsonl"), "seq_len"), (std::vector<double>{6, 6, 8}));
}

// Issue 33 item 1: --print-schedule heads its grid with the mesh under mpirun, and --print-memory
// plans the mesh of --world with each stage's ranks (comm/mesh.h: tp innermost, then pp, then dp;
// at dp 2 x tp 2 x pp 2 stage 0 holds ranks 0, 1 of replica 0 and 4, 5 of replica 1).
TEST(TrainTensorParallel, PrintScheduleAndPrintMemoryShowTheMesh) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  const Outcome schedule = train(4, kRun + " --tp 2 --pp 2 --print-schedule");
  ASSERT_EQ(schedule.status, 0) << schedule.err;
  EXPECT_EQ(schedule.out.rfind("1f1b schedule, dp = 1 x tp = 2 x pp = 2, p = 2, m = ", 0), 0u) << schedule.out;
  const Outcome memory = train(1, kRun + " --print-memory --world 8 --dp 2 --tp 2 --pp 2");
  ASSERT_EQ(memory.status, 0) << memory.err;
  EXPECT_NE(memory.out.find(", dp=2 x tp=2 x pp=2, 1f1b v=1, "), std::string::npos) << memory.out;
  const size_t ranks = memory.out.find("\nranks ");
  ASSERT_NE(ranks, std::string::npos) << memory.out;
  const std::string row = memory.out.substr(ranks + 1, memory.out.find('\n', ranks + 1) - ranks - 1);
  std::vector<std::string> cells;
  for (size_t at = row.find_first_not_of(' ', 5); at != std::string::npos; at = row.find_first_not_of(' ', at)) {
    const size_t end = row.find(' ', at);
    cells.push_back(row.substr(at, end - at));
    at = end;
  }
  EXPECT_EQ(cells, (std::vector<std::string>{"0,1,4,5", "2,3,6,7"})) << row;
}
