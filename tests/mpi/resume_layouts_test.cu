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
#include "trainer/checkpoints/save_and_resume.h"
#include "trainer/command_line/options.h"
#include "trainer/program/run.h"

namespace {

using namespace pipeline_harness;

// Rank 0's temporary directory, known to every rank, holding a small text to train on.
struct SharedDirectory {
  TempDir own;  // every rank makes one; all use rank 0's
  std::string path;
  SharedDirectory() {
    char name[512] = {};
    own.file("").copy(name, sizeof(name) - 1);
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    path = name;
    if (rank_in_world() == 0) {
      std::string text;
      for (int i = 0; i < 400; ++i) text += i % 7 ? "layout " : "resume\n";
      write_bytes(path + "text.txt", {text.begin(), text.end()});
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDirectory() { MPI_Barrier(MPI_COMM_WORLD); }  // rank 0's goes when every rank is done with it
};

struct Layout {
  int dp, pp;
  const char* schedule;
  int virtual_stages;
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

// A state saved at dp 2 x pp 2 after 2 steps, loaded at each other layout of 4 ranks and saved
// back: the model file and the state file are the source's, byte for byte.
void expect_every_layout_saves_the_state_back(const std::string& dtype) {
  ASSERT_EQ(size_of_world(), 4) << "the resume matrix is for mpirun -np 4";
  SharedDirectory dir;
  TrainOptions source = options_at(dir.path, {2, 2, "1f1b", 1}, dtype);
  source.steps = 2;
  source.save = dir.path + "source.bin";
  run_training(source, nullptr);
  const std::vector<char> model = read_bytes(source.save), state = read_bytes(training_state_path(source.save));
  for (const Layout& layout : {Layout{1, 4, "1f1b", 1}, Layout{4, 1, "1f1b", 1}, Layout{2, 2, "interleaved", 2},
                               Layout{2, 2, "zb-v", 2}}) {
    SCOPED_TRACE("dp " + std::to_string(layout.dp) + " pp " + std::to_string(layout.pp) + " " + layout.schedule);
    TrainOptions options = options_at(dir.path, layout, dtype);
    options.steps = 4;
    options.resume = source.save;
    options.seed = 4242;  // the state's rounding seed and sampler state must win over the flag's
    const std::string again = dir.path + "again.bin";
    if (dtype == "bf16")
      load_and_save<__nv_bfloat16>(options, again);
    else
      load_and_save<float>(options, again);
    EXPECT_TRUE(read_bytes(again) == model) << "the model file saved back differs from the one loaded";
    EXPECT_TRUE(read_bytes(training_state_path(again)) == state) << "the state file saved back differs";
  }
}

}  // namespace

TEST(ResumeLayouts, Fp32StateSavedAtOneLayoutSavesBackBitwiseFromEveryOther) {
  expect_every_layout_saves_the_state_back("fp32");
}

// bf16 parameters with fp32 master weights, and the rounding seed, which the state carries.
TEST(ResumeLayouts, Bf16StateSavedAtOneLayoutSavesBackBitwiseFromEveryOther) {
  expect_every_layout_saves_the_state_back("bf16");
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
