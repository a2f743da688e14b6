// Checkpoints move between layouts (issue 32 item 4). The files are the full model's whatever the
// layout (llm.c's model file, the training state with the full moments and master weights in
// llm.c's order), so a state saved at one layout must load at any other and save back to the
// same bytes: nothing lost, nothing reordered, the data position, the sampler's state and the
// rounding seed carried over. Together with Pipeline.FourStageCheckpointResumesBitwise (a resume
// continues as the run that did not stop, on one layout), a resume at another layout then
// continues exactly as an uninterrupted run at that layout from the same state. And where the
// new layout computes the same sums as the old (the same replicas, another schedule), the resumed
// run's losses are the old layout's own, bitwise. The world is 4 ranks; the source layout is
// 2 replicas of 2 stages (1F1B), as the issue's resume matrix asks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/groups.h"
#include "tests/file_tools.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/mpi/shared_directory.h"
#include "trainer/checkpoints/save_and_resume.h"
#include "trainer/command_line/options.h"
#include "trainer/program/run.h"

namespace {

using namespace pipeline_harness;

struct Layout {
  int dp, pp;
  const char* schedule;
  int virtual_stages;
  int zero = 0;  // --zero 1: the optimizer state in shards over the replicas
};

// 4 layers, so that every layout below has a whole number of layers per chunk. The global batch
// is 4 microbatches on every layout (microbatches per replica 4 / dp), so that the data position
// after a step is the same number everywhere.
TrainOptions options_at(const std::string& dir, const Layout& layout, const std::string& dtype) {
  TrainOptions options;
  options.train_data = dir + "text.txt";
  options.layers = 4;
  options.heads = 2;
  options.dim = 16;
  options.seq_len = kT;
  options.batch = kB;
  options.dp = layout.dp;
  options.pp = layout.pp;
  options.schedule = layout.schedule;
  options.virtual_stages = layout.virtual_stages;
  options.zero = layout.zero;
  options.microbatches = 4 / layout.dp;
  options.dtype = dtype;
  options.warmup = 1;
  options.val_every = 0;
  options.sample_every = 0;
  options.shuffle = true;  // so that the sampler's state matters
  return options;
}

// Loads options.resume at options' layout as ./train does and saves it straight back to path,
// without a step.
template <typename Element>
void load_and_save(const TrainOptions& options, const std::string& path) {
  const RunSetup setup = prepare_run(options);
  CommGroups groups = create_comm_groups(setup.mesh);
  Trainer<Element> trainer = create_trainer<Element>(setup.start.config, setup.B, setup.T, setup.layout, groups,
                                                     {options.master_weights == 1, setup.start.rounding_seed});
  upload_parameters(trainer, setup.start.parameters);
  upload_moments(trainer, setup.start.m, setup.start.v);
  if (!setup.start.master.empty()) upload_master_weights(trainer, setup.start.master);
  save_checkpoint(path, trainer, setup.start.position);
  destroy_trainer(trainer);
  destroy_comm_groups(groups);
}

// 2 steps at `layout`, saved to path.
void train_and_save(const std::string& dir, const Layout& layout, const std::string& dtype, const std::string& path) {
  TrainOptions options = options_at(dir, layout, dtype);
  options.steps = 2;
  options.save = path;
  run_training(options, nullptr);
}

// The checkpoint at source loaded at each of the layouts and saved back: the model file and the
// state file are the source's, byte for byte.
void expect_saved_back_alike(const std::string& dir, const std::string& source, const std::vector<Layout>& layouts,
                             const std::string& dtype) {
  const std::vector<char> model = read_bytes(source), state = read_bytes(training_state_path(source));
  for (const Layout& layout : layouts) {
    SCOPED_TRACE("dp " + std::to_string(layout.dp) + " pp " + std::to_string(layout.pp) + " " + layout.schedule +
                 " zero " + std::to_string(layout.zero));
    TrainOptions options = options_at(dir, layout, dtype);
    options.steps = 4;
    options.resume = source;
    options.seed = 4242;  // the state's rounding seed and sampler state must win over the flag's
    const std::string again = dir + "again.bin";
    if (dtype == "bf16")
      load_and_save<__nv_bfloat16>(options, again);
    else
      load_and_save<float>(options, again);
    EXPECT_TRUE(read_bytes(again) == model) << "the model file saved back differs from the one loaded";
    EXPECT_TRUE(read_bytes(training_state_path(again)) == state) << "the state file saved back differs";
  }
}

// A state saved at dp 2 x pp 2 after 2 steps, loaded at each other layout of 4 ranks and saved back.
void expect_every_layout_saves_the_state_back(const std::string& dtype) {
  ASSERT_EQ(size_of_world(), 4) << "the resume matrix is for mpirun -np 4";
  SharedDirectory dir;
  const std::string source = dir.path + "source.bin";
  train_and_save(dir.path, {2, 2, "1f1b", 1}, dtype, source);
  expect_saved_back_alike(dir.path, source,
                          {{1, 4, "1f1b", 1}, {4, 1, "1f1b", 1}, {2, 2, "interleaved", 2}, {2, 2, "zb-v", 2}}, dtype);
}

}  // namespace

TEST(ResumeLayouts, Fp32StateSavedAtOneLayoutSavesBackBitwiseFromEveryOther) {
  expect_every_layout_saves_the_state_back("fp32");
}

// bf16 parameters with fp32 master weights, and the rounding seed, which the state carries.
TEST(ResumeLayouts, Bf16StateSavedAtOneLayoutSavesBackBitwiseFromEveryOther) {
  expect_every_layout_saves_the_state_back("bf16");
}

// ZeRO-1 (--zero 1): at 2 replicas of 2 stages, 2 steps save the files of --zero 0, byte for byte
// (the two runs are bitwise alike, docs/pipeline.md "ZeRO-1", and the replicas' shards are
// gathered before the save); loaded at --zero 1 on 4 replicas and on 2 replicas of 2 stages with
// ZB-V, each replica taking its shard, they save back unchanged. In fp32, and in bf16 with master
// weights (sharded too).
TEST(ResumeLayouts, ZeroOneSavesTheFilesOfZeroZero) {
  ASSERT_EQ(size_of_world(), 4) << "the resume matrix is for mpirun -np 4";
  SharedDirectory dir;
  for (const std::string dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string unsharded = dir.path + "zero0.bin", sharded = dir.path + "zero1.bin";
    train_and_save(dir.path, {2, 2, "1f1b", 1, 0}, dtype, unsharded);
    train_and_save(dir.path, {2, 2, "1f1b", 1, 1}, dtype, sharded);
    EXPECT_TRUE(read_bytes(sharded) == read_bytes(unsharded)) << "the model files of --zero 1 and --zero 0 differ";
    EXPECT_TRUE(read_bytes(training_state_path(sharded)) == read_bytes(training_state_path(unsharded)))
        << "the state files of --zero 1 and --zero 0 differ";
    expect_saved_back_alike(dir.path, sharded, {{4, 1, "1f1b", 1, 1}, {2, 2, "zb-v", 2, 1}}, dtype);
  }
}

// Saved at dp 2 x pp 2 with 1F1B after 2 steps, resumed with the interleaved schedule on the same
// replicas: steps 3 and 4 give the losses of the 1F1B run that did not stop, bitwise (the
// schedule does not change the sums).
TEST(ResumeLayouts, ResumedWithAnotherScheduleContinuesTheUninterruptedRunBitwise) {
  ASSERT_EQ(size_of_world(), 4) << "the resume matrix is for mpirun -np 4";
  SharedDirectory dir;
  TrainOptions straight = options_at(dir.path, {2, 2, "1f1b", 1}, "fp32");
  straight.steps = 4;
  const RunResult uninterrupted = run_training(straight, nullptr);
  TrainOptions first = straight;
  first.steps = 2;
  first.save = dir.path + "first.bin";
  run_training(first, nullptr);
  TrainOptions second = options_at(dir.path, {2, 2, "interleaved", 2}, "fp32");
  second.steps = 4;
  second.resume = first.save;
  const RunResult resumed = run_training(second, nullptr);
  ASSERT_EQ(uninterrupted.steps.size(), 4u);
  ASSERT_EQ(resumed.steps.size(), 2u);
  EXPECT_EQ(resumed.steps[0].loss, uninterrupted.steps[2].loss);
  EXPECT_EQ(resumed.steps[1].loss, uninterrupted.steps[3].loss);
  EXPECT_EQ(resumed.steps[1].grad_norm, uninterrupted.steps[3].grad_norm);
}
