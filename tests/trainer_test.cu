// The single-process train program: its learning-rate schedule, bitwise resume and determinism,
// a loss that falls, starting from an llm.c checkpoint, and one-line errors for bad checkpoints;
// in fp32 and in bf16 (--dtype bf16: llm.c's model file version 5, master weights in the state
// file, --init across element types).
// Runs use a tiny model (L=2, NH=2, C=16, T=16, B=2) on generated text, so each takes ~50 ms a step
// in the CPU build.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/checkpoint_format.h"
#include "model/config.h"
#include "model/parameters.h"
#include "tests/file_tools.h"
#include "tests/tiny_run.h"
#include "trainer/checkpoints/save_and_resume.h"
#include "trainer/step/lr_schedule.h"
#include "trainer/step/trainer.h"
#include "trainer/command_line/options.h"
#include "trainer/program/run.h"

namespace {

// Words drawn by a fixed generator: text with some structure but no short period.
std::string word_text(size_t words) {
  const char* vocabulary[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "cat"};
  std::mt19937_64 generator(42);
  std::string text;
  for (size_t i = 0; i < words; ++i) {
    text += vocabulary[generator() % 11];
    text += i % 12 == 11 ? ".\n" : " ";
  }
  return text;
}

void write_text(const std::string& path, const std::string& text) { write_bytes(path, {text.begin(), text.end()}); }

std::vector<double> losses_of(const RunResult& run) {
  std::vector<double> losses;
  for (const StepRecord& step : run.steps) losses.push_back(step.loss);
  return losses;
}

std::string run_error(const TrainOptions& options) {
  return error_of([&] { run_training(options, nullptr); });
}

// The fresh model of tiny_options with this seed, as an llm.c checkpoint.
void write_tiny_checkpoint(const std::string& path, uint64_t seed) {
  const GPTConfig config = make_gpt_config(2, 2, 16, 16, 256);
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, seed);
  write_model_file(path, config, parameters, CheckpointDtype::fp32);
}

}  // namespace

// Schedule values computed by hand from the formula in lr_schedule.h. Double arithmetic: 1e-18
// absolute is 1e-15 of rates near 1e-3, room for the rounding of a cosine and a few products.
TEST(Trainer, LearningRateWarmsUpFromZeroThenFollowsTheCosineToTheFloor) {
  const LrSchedule schedule{1e-3, 1e-4, 10, 110, true};

  EXPECT_EQ(learning_rate(schedule, 0), 0.0);
  EXPECT_NEAR(learning_rate(schedule, 5), 5e-4, 1e-18);
  EXPECT_NEAR(learning_rate(schedule, 10), 1e-3, 1e-18);   // warm-up end: the peak
  EXPECT_NEAR(learning_rate(schedule, 60), 5.5e-4, 1e-18);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(learning_rate(schedule, 35), 1e-4 + 9e-4 * 0.5 * (1 + std::sqrt(0.5)), 1e-18);  // a quarter
  EXPECT_NEAR(learning_rate(schedule, 110), 1e-4, 1e-18);  // end: the floor
  EXPECT_NEAR(learning_rate(schedule, 200), 1e-4, 1e-18);  // beyond the end it stays there
}

TEST(Trainer, ConstantScheduleHoldsThePeakAfterTheWarmUp) {
  const LrSchedule schedule{2e-3, 1e-4, 4, 100, false};

  EXPECT_NEAR(learning_rate(schedule, 2), 1e-3, 1e-18);
  EXPECT_EQ(learning_rate(schedule, 4), 2e-3);
  EXPECT_EQ(learning_rate(schedule, 99), 2e-3);
}

TEST(Trainer, ScheduleFollowsTheOptions) {
  TrainOptions options;
  options.lr = 2e-3f;
  options.min_lr = 0;
  options.warmup = 0;
  options.steps = 4;

  EXPECT_NEAR(learning_rate(lr_schedule_from_options(options), 2), double(2e-3f) / 2, 1e-18);
}

TEST(Trainer, SameSeedGivesBitwiseTheSameLosses) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.steps = 5;

  const std::vector<double> first = losses_of(run_training(options, nullptr));
  const std::vector<double> second = losses_of(run_training(options, nullptr));
  options.seed = 7;
  const std::vector<double> other_seed = losses_of(run_training(options, nullptr));

  EXPECT_EQ(first, second);
  EXPECT_NE(first[0], other_seed[0]);  // the seed reaches the initialisation
}

// 20 steps in one run equal 10 steps, a checkpoint and 10 resumed steps: losses, norms, samples
// and the final files, bit for bit. The constant schedule keeps the learning rates of a 10-step
// and a 20-step run the same; the warm-up is shorter than 10 steps, so the restored step count
// decides it. Shuffled reading and samples every 5 steps make the data position and the sampler's
// state part of what must be restored.
TEST(Trainer, ResumeContinuesBitwise) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.lr_schedule = "constant";
  options.warmup = 3;
  options.shuffle = true;
  options.sample_every = 5;
  options.sample_len = 8;

  TrainOptions whole = options;
  whole.steps = 20;
  whole.save = dir.file("whole.bin");
  const RunResult straight = run_training(whole, nullptr);
  TrainOptions first_half = options;
  first_half.steps = 10;
  first_half.save = dir.file("half.bin");
  run_training(first_half, nullptr);
  TrainOptions second_half = options;
  second_half.steps = 20;
  second_half.resume = dir.file("half.bin");
  second_half.save = dir.file("resumed.bin");
  const RunResult resumed = run_training(second_half, nullptr);

  ASSERT_EQ(straight.steps.size(), 20u);
  ASSERT_EQ(resumed.steps.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(resumed.steps[i].step, straight.steps[10 + i].step);
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[10 + i].loss) << "step " << 11 + i;
    EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[10 + i].grad_norm) << "step " << 11 + i;
    EXPECT_EQ(resumed.steps[i].lr, straight.steps[10 + i].lr) << "step " << 11 + i;
  }
  ASSERT_EQ(straight.samples.size(), 4u);
  EXPECT_EQ(resumed.samples, std::vector<std::string>(straight.samples.begin() + 2, straight.samples.end()));
  EXPECT_EQ(read_bytes(dir.file("resumed.bin")), read_bytes(dir.file("whole.bin")));
  EXPECT_EQ(read_bytes(dir.file("resumed.bin.state")), read_bytes(dir.file("whole.bin.state")));
}

// bf16 (with and without master weights): 10 steps in one run equal 5 steps, a checkpoint and 5
// resumed steps, losses, norms and files bit for bit. The master weights, the moments and the
// rounding seed come from the state file; a resumed run given another --seed still rounds as the
// run it continues (the seed reaches nothing else here: no shuffle, no samples).
TEST(Trainer, Bf16ResumeContinuesBitwise) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  for (int master_weights : {1, 0}) {
    SCOPED_TRACE("--master-weights " + std::to_string(master_weights));
    TrainOptions options = tiny_run_options(dir.file("text.txt"));
    options.dtype = "bf16";
    options.master_weights = master_weights;
    options.lr_schedule = "constant";
    options.warmup = 3;

    TrainOptions whole = options;
    whole.save = dir.file("whole.bin");
    const RunResult straight = run_training(whole, nullptr);
    TrainOptions first_half = options;
    first_half.steps = 5;
    first_half.save = dir.file("half.bin");
    run_training(first_half, nullptr);
    TrainOptions second_half = options;
    second_half.resume = dir.file("half.bin");
    second_half.save = dir.file("resumed.bin");
    second_half.seed = 99;
    const RunResult resumed = run_training(second_half, nullptr);

    ASSERT_EQ(straight.steps.size(), 10u);
    ASSERT_EQ(resumed.steps.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(resumed.steps[i].loss, straight.steps[5 + i].loss) << "step " << 6 + i;
      EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[5 + i].grad_norm) << "step " << 6 + i;
    }
    EXPECT_EQ(read_bytes(dir.file("resumed.bin")), read_bytes(dir.file("whole.bin")));
    EXPECT_EQ(read_bytes(dir.file("resumed.bin.state")), read_bytes(dir.file("whole.bin.state")));
    EXPECT_EQ(read_training_state(dir.file("whole.bin.state")).master.size(),
              master_weights ? num_parameters(make_gpt_config(2, 2, 16, 16, 256)) : 0u);
  }
}

// --save in bf16 writes llm.c's version 5: its header, 2 bytes a parameter. Started from it
// (--init) and saved after a step at learning rate 0 (the warm-up's first), it reads back
// equal: each bf16 value goes into the run and out again unchanged.
TEST(Trainer, Bf16SaveWritesLlmcVersion5ThatReadsBackEqual) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.dtype = "bf16";
  options.steps = 3;
  options.save = dir.file("run.bin");
  run_training(options, nullptr);
  const GPTConfig config = make_gpt_config(2, 2, 16, 16, 256);
  const std::vector<char> bytes = read_bytes(dir.file("run.bin"));
  ASSERT_EQ(bytes.size(), 1024 + 2 * num_parameters(config));
  int32_t header[8];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(std::vector<int32_t>(header, header + 8), (std::vector<int32_t>{20240326, 5, 16, 256, 2, 2, 16, 256}));
  EXPECT_TRUE(std::all_of(bytes.begin() + 32, bytes.begin() + 1024, [](char c) { return c == 0; }));

  TrainOptions again = tiny_run_options(dir.file("text.txt"));
  again.dtype = "bf16";
  again.steps = 1;
  again.init = dir.file("run.bin");
  again.save = dir.file("again.bin");
  run_training(again, nullptr);
  EXPECT_EQ(read_bytes(dir.file("again.bin")), bytes);
}

// An fp32 file (version 3) started with --dtype bf16 is rounded to nearest; saved after a step
// at learning rate 0 it is that rounding in version 5. Started from that with --dtype fp32, the
// bf16 values widen exactly: saved again (version 3), they are the same values.
TEST(Trainer, Fp32CheckpointLoadedInBf16AndBack) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  write_tiny_checkpoint(dir.file("fp32.bin"), 7);
  const ModelFile original = read_model_file(dir.file("fp32.bin"));
  TrainOptions to_bf16 = tiny_run_options(dir.file("text.txt"));
  to_bf16.dtype = "bf16";
  to_bf16.steps = 1;
  to_bf16.init = dir.file("fp32.bin");
  to_bf16.save = dir.file("bf16.bin");
  EXPECT_EQ(load_starting_point(to_bf16).description,
            "llm.c checkpoint " + dir.file("fp32.bin") + " (fp32, version 3), rounded to nearest bf16");
  run_training(to_bf16, nullptr);
  const ModelFile bf16 = read_model_file(dir.file("bf16.bin"));
  ASSERT_EQ(bf16.dtype, CheckpointDtype::bf16);
  std::vector<float> rounded(original.parameters.size());
  for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = float(__float2bfloat16(original.parameters[i]));
  EXPECT_EQ(bf16.parameters, rounded);
  EXPECT_NE(bf16.parameters, original.parameters);

  TrainOptions back = tiny_run_options(dir.file("text.txt"));
  back.steps = 1;
  back.init = dir.file("bf16.bin");
  back.save = dir.file("back.bin");
  EXPECT_EQ(load_starting_point(back).description,
            "llm.c checkpoint " + dir.file("bf16.bin") + " (bf16, version 5), widened to fp32");
  run_training(back, nullptr);
  const ModelFile fp32 = read_model_file(dir.file("back.bin"));
  EXPECT_EQ(fp32.dtype, CheckpointDtype::fp32);
  EXPECT_EQ(fp32.parameters, rounded);
}

// --resume continues a run bitwise: another element type, or master weights where the state has
// none (or the reverse), is one line saying what to give.
TEST(Trainer, ResumeWithAnotherPrecisionGivesOneLine) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  TrainOptions bf16 = tiny_run_options(dir.file("text.txt"));
  bf16.dtype = "bf16";
  bf16.steps = 1;
  bf16.save = dir.file("bf16.bin");
  run_training(bf16, nullptr);
  TrainOptions fp32 = tiny_run_options(dir.file("text.txt"));
  fp32.steps = 1;
  fp32.save = dir.file("fp32.bin");
  run_training(fp32, nullptr);

  TrainOptions resume = tiny_run_options(dir.file("text.txt"));
  resume.resume = dir.file("bf16.bin");
  EXPECT_EQ(run_error(resume), dir.file("bf16.bin") +
                                   ": bf16 checkpoint (version 5) resumes with --dtype bf16 (--init starts a new run "
                                   "from it with --dtype fp32)");
  resume.dtype = "bf16";
  resume.master_weights = 0;
  EXPECT_EQ(run_error(resume),
            dir.file("bf16.bin.state") + ": holds fp32 master weights; resume with --master-weights 1");
  resume.resume = dir.file("fp32.bin");
  EXPECT_EQ(run_error(resume), dir.file("fp32.bin") +
                                   ": fp32 checkpoint (version 3) resumes with --dtype fp32 (--init starts a new run "
                                   "from it with --dtype bf16)");
  bf16.master_weights = 0;
  run_training(bf16, nullptr);
  resume.resume = dir.file("bf16.bin");
  resume.master_weights = 1;
  EXPECT_EQ(run_error(resume), dir.file("bf16.bin.state") +
                                   ": holds no master weights (saved with --master-weights 0); resume with "
                                   "--master-weights 0");
}

// A sentence repeated: within 30 steps the model learns its letters. ln 256 = 5.55 at the start;
// this run reaches about 2.5 (bf16 too), and the bound, 2 nats below the start, leaves a margin of 1.
TEST(Trainer, LossFallsOnRepetitiveText) {
  TempDir dir;
  std::string text;
  while (text.size() < 20000) text += "in the beginning god created the heaven and the earth.\n";
  write_text(dir.file("text.txt"), text);
  for (const char* dtype : {"fp32", "bf16"}) {
    TrainOptions options = tiny_run_options(dir.file("text.txt"));
    options.steps = 30;
    options.lr = 1e-2f;
    options.min_lr = 1e-3f;
    options.dtype = dtype;

    const std::vector<double> losses = losses_of(run_training(options, nullptr));

    EXPECT_NEAR(losses.front(), std::log(256.0), 0.1) << dtype;  // a fresh model guesses uniformly
    EXPECT_LT(losses.back(), 3.5) << dtype;
  }
}

// A model file written by write_model_file starts the run: the first loss is bitwise that of a
// fresh run initialised with the same seed (the other uses of the seed are off).
TEST(Trainer, InitStartsFromAnLlmcCheckpoint) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  write_tiny_checkpoint(dir.file("model.bin"), 7);
  TrainOptions from_file = tiny_run_options(dir.file("text.txt"));
  from_file.steps = 3;
  from_file.init = dir.file("model.bin");
  TrainOptions fresh = tiny_run_options(dir.file("text.txt"));
  fresh.steps = 3;
  fresh.seed = 7;

  const std::vector<double> losses = losses_of(run_training(from_file, nullptr));

  EXPECT_EQ(losses, losses_of(run_training(fresh, nullptr)));
  EXPECT_LT(losses.back(), losses.front());
}

TEST(Trainer, InitRejectsAnExplicitFlagThatDisagreesWithTheCheckpoint) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  write_tiny_checkpoint(dir.file("model.bin"), 7);
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.init = dir.file("model.bin");
  options.dim = 32;
  options.given = {"dim"};

  EXPECT_EQ(run_error(options), dir.file("model.bin") + ": header channels 16 disagrees with --dim 32");
}

TEST(Trainer, TruncatedCheckpointGivesItsError) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  write_tiny_checkpoint(dir.file("model.bin"), 7);
  std::vector<char> bytes = read_bytes(dir.file("model.bin"));
  bytes.resize(bytes.size() - 100);
  write_bytes(dir.file("model.bin"), bytes);
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.init = dir.file("model.bin");

  const std::string error = run_error(options);

  EXPECT_EQ(error.find(dir.file("model.bin") + ": "), 0u) << error;
  EXPECT_NE(error.find("(truncated)"), std::string::npos) << error;
}

TEST(Trainer, LogHasOneJsonLinePerStepWithValidationWhenComputed) {
  TempDir dir;
  write_text(dir.file("text.txt"), word_text(3000));
  TrainOptions options = tiny_run_options(dir.file("text.txt"));
  options.steps = 3;
  options.val_every = 2;
  options.val_batches = 2;
  options.log = dir.file("log.jsonl");

  run_training(options, nullptr);

  std::ifstream log(dir.file("log.jsonl"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("{\"step\": 1, \"loss\": ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[0].find("val_loss"), std::string::npos);  // not computed after step 1
  EXPECT_NE(lines[1].find("\"val_loss\": "), std::string::npos);  // every 2 steps
  EXPECT_NE(lines[2].find("\"val_loss\": "), std::string::npos);  // and after the last
  for (const char* field : {"\"lr\": ", "\"grad_norm\": ", "\"ms\": ", "\"tokens_per_s\": "})
    EXPECT_NE(lines[2].find(field), std::string::npos) << field;
}

// The program itself (built by `make train`, which `make test` does first): a bad checkpoint
// ends it with status 1 and the one line "train: error: <message>"; so does --master-weights 0
// without bf16.
TEST(Trainer, ProgramReportsAnErrorInOneLineAndExitsWithStatus1) {
  if (!std::filesystem::exists("./train")) GTEST_SKIP() << "./train is not built (make train)";
  TempDir dir;
  write_bytes(dir.file("model.bin"), std::vector<char>(100, 'x'));
  const std::string command = "./train --init " + dir.file("model.bin") + " > " + dir.file("out.txt") + " 2> " +
                              dir.file("err.txt");

  const int status = std::system(command.c_str());

  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const std::vector<char> err = read_bytes(dir.file("err.txt"));
  EXPECT_EQ(std::string(err.begin(), err.end()),
            "train: error: " + dir.file("model.bin") + ": file is 100 bytes, shorter than the 1024-byte header\n");

  const int fp32_status = std::system(("./train --master-weights 0 > " + dir.file("out.txt") + " 2> " +
                                       dir.file("err.txt")).c_str());
  EXPECT_TRUE(WIFEXITED(fp32_status) && WEXITSTATUS(fp32_status) == 1) << fp32_status;
  const std::vector<char> fp32_err = read_bytes(dir.file("err.txt"));
  EXPECT_EQ(std::string(fp32_err.begin(), fp32_err.end()),
            "train: error: --master-weights 0 needs --dtype bf16 (fp32 parameters are their own master weights)\n");
}

// --attention auto: the fused attention where its kernels take the heads (HS a multiple of 16 up
// to 128: the default model's 32, GPT-2's 64), the materialised one elsewhere (HS 8, 24, 256);
// an explicit choice is kept, and fused with heads the kernels do not take is one line.
TEST(Trainer, AttentionAutoIsFusedWhereItsKernelsTakeTheHeads) {
  TrainOptions options;
  const auto kind = [&](const char* attention, int heads, int channels) {
    options.attention = attention;
    return layout_from_options(options, make_gpt_config(2, heads, channels, 16, 256)).attention;
  };
  EXPECT_EQ(kind("auto", 4, 128), AttentionKind::fused);
  EXPECT_EQ(kind("auto", 12, 768), AttentionKind::fused);
  EXPECT_EQ(kind("auto", 2, 16), AttentionKind::materialized);
  EXPECT_EQ(kind("auto", 2, 48), AttentionKind::materialized);
  EXPECT_EQ(kind("auto", 1, 256), AttentionKind::materialized);
  EXPECT_EQ(kind("materialized", 4, 128), AttentionKind::materialized);
  EXPECT_EQ(kind("fused", 4, 128), AttentionKind::fused);
  EXPECT_EQ(error_of([&] { kind("fused", 2, 16); }),
            "--attention fused: the model's heads have C / NH = 16 / 2 channels; the fused kernels take a multiple of "
            "16 up to 128, --attention materialized any");
}
