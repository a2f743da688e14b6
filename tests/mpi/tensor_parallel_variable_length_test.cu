// Tensor parallelism at variable length (issue 34 with issue 33): tp 2 x pp 2 under mpirun -np 4
// trains a small GPT (L = 2, NH = 4, C = 16, maxT = 8, V = 100, Vp = 128, B = 2, m = 4, 1F1B) on
// document-aligned microbatches, each at its own T with padding, for three clipped steps, against
// the single process over the same data, which every rank runs itself. Checked: step 1 holds
// different lengths and padding; the losses and the gradient norms of every step, and every
// gradient the rank holds after step 1 (its slices cut from the single process's tensors), within
// TensorParallelLayouts' fp32 tolerance (tests/mpi/tensor_parallel_layouts_test.cu: tp adds partial
// sums in another order, at most 128 terms, 7.6e-6 of their scale; bound 2e-5). Measured, CPU
// build, 2026-11-27 (step 1's T: 7, 8, 8, 7): losses within 1.8e-8 relative, norms within 1.1e-7,
// gradients within 3.3e-7 of their scale; with the padding's loss counted on the vocab-parallel
// head (fault masked-target-enters-the-tp-loss) the check fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "model/parameter_layout.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/scaled_error.h"
#include "trainer/data/documents.h"
#include "trainer/step/trainer.h"

namespace {

constexpr int kB = 2, kT = 8, kM = 4, kSteps = 3;
constexpr double kTolerance = 2e-5;  // relative to the loss, the norm and each gradient tensor's scale
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};

GPTConfig config() { return make_gpt_config(2, 4, 16, kT, 100); }

// 300 chapters of the text format's separator ("A<n>:1 ", bytes below 100), each followed by
// tokens in [11, 100) (no newline, so no other chapter starts) and a newline: as
// tests/random_chapters.h, three in four with 0 or 1 token (documents of 6 or 7 inputs), the others
// 10 to 15 (16 to 21 inputs), so that pairs of sequences at maxT 8 differ in length.
const TokenDataset& documents() {
  static const TokenDataset data = [] {
    TokenDataset d;
    uint64_t state = 7;
    const auto next = [&state] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return state >> 33;
    };
    for (int chapter = 0; chapter < 300; ++chapter) {
      for (char c : "A" + std::to_string(chapter % 9 + 1) + ":1 ") d.tokens.push_back(uint16_t(c));
      const int count = next() % 4 == 0 ? int(10 + next() % 6) : int(next() % 2);
      for (int n = 0; n < count; ++n) d.tokens.push_back(uint16_t(11 + next() % 89));
      d.tokens.push_back(uint16_t('\n'));
    }
    d.vocab_size = 100;
    d.source = "chapters";
    return d;
  }();
  return data;
}

struct Outcome {
  std::vector<double> losses, norms;
  std::vector<int> lengths;       // step 1's, this replica's
  std::vector<float> gradients;   // after step 1, llm.c's layout (the rank's slices, zeros elsewhere)
  ParameterLayout layout;
};

Outcome train(const CommGroups& groups) {
  const PipelineLayout layout{ScheduleKind::one_f_one_b, kM, 1, false, {}};
  Trainer<float> trainer = create_trainer<float>(config(), kB, kT, layout, groups, MixedPrecision{true, 5});
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config(), 1234);
  upload_parameters(trainer, parameters);
  DocumentReader reader = make_document_reader(documents(), kB, kT, false, 1);
  Outcome run;
  for (int t = 1; t <= kSteps; ++t) {
    const StepResult step = train_step(trainer, reader, kT, kSettings, 3e-3, t);
    run.losses.push_back(step.loss);
    run.norms.push_back(step.grad_norm);
    if (t == 1) {
      run.gradients = download_gradients(trainer);
      run.lengths = trainer.shape.lengths;
      EXPECT_LT(step.real_tokens, step.positions) << "step 1 should hold padding";
    }
  }
  run.layout = trainer.parameter_layout;
  destroy_trainer(trainer);
  return run;
}

}  // namespace

TEST(TensorParallelVariableLength, TwoTpRanksTimesTwoStagesGiveTheSingleProcess) {
  if (pipeline_harness::size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Outcome single = train(create_world_groups(make_mesh(1, 1, 1, 0)));
  CommGroups groups = create_world_groups(make_mesh(1, 2, 2, 4, pipeline_harness::rank_in_world()));
  const Outcome run = train(groups);
  const int tp_rank = groups.mesh.tp_rank;
  destroy_world_groups(groups);

  EXPECT_GT(std::set<int>(single.lengths.begin(), single.lengths.end()).size(), 1u) << "step 1's lengths should differ";
  EXPECT_EQ(run.lengths, single.lengths);
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(run.losses[i], single.losses[i], kTolerance * single.losses[i]) << "loss, step " << i + 1;
    EXPECT_NEAR(run.norms[i], single.norms[i], kTolerance * single.norms[i]) << "gradient norm, step " << i + 1;
  }
  const std::vector<float> mine = to_stage_layout(run.layout, run.gradients);
  const std::vector<float> want = to_stage_layout(run.layout, single.gradients);
  for (const ParameterRegion& r : run.layout.regions) {
    const std::vector<double> got(mine.begin() + r.offset, mine.begin() + r.offset + r.count);
    const std::vector<double> expected(want.begin() + r.offset, want.begin() + r.offset + r.count);
    EXPECT_LE(max_error_relative_to_scale(got, expected), kTolerance)
        << parameter_tensor_name(r.tensor) << " layer " << r.layer << " on tp rank " << tp_rank;
  }
}
