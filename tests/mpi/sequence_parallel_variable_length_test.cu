// Sequence parallelism at variable length (issue 33 item 5 with issue 34): --sequence-parallel
// shards each microbatch's B T rows over the tp ranks, so with --documents every microbatch's T is
// rounded up to a multiple of tp, the rows padded (trainer/data/documents.h's length_multiple).
// tp 2 x pp 2 with it under mpirun -np 4 trains a small GPT (L = 2, NH = 4, C = 16, maxT = 8,
// V = 100, Vp = 128, B = 2, m = 4, 1F1B) for three clipped steps on document-aligned microbatches
// of T 8, 6, 7, 7, read as 8, 6, 8, 8, against:
//  - the single process over the same data, which every rank runs itself at the unrounded lengths:
//    the losses, the gradient norms and every gradient the rank holds after step 1 (its slices cut
//    from the single process's tensors) within TensorParallelLayouts' fp32 tolerance
//    (tests/mpi/tensor_parallel_layout_check.h: tp's partial sums in another order, at most 128
//    terms, 7.6e-6 of their scale; each LayerNorm gradient summed over a rank's B T / tp rows then
//    over tp adds K = B T / tp + tp <= 10 more; bound 2e-5). The rounding's padding rows carry no
//    target, so they add exact zeros to every gradient;
//  - its fixed-tp twin, 2 replicas of tp 2 with it on one stage, each reading the whole batch
//    (the data repeats every m B sequences): bitwise the losses, the norms and the model after the
//    last step (tensor_parallel_layout_check.h's expect_bitwise_the_same_tp_on_half_the_stages
//    says why two equal halves give the one replica's numbers to the bit).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "model/parameter_layout.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/scaled_error.h"
#include "trainer/checkpoints/gather_model.h"
#include "trainer/data/documents.h"
#include "trainer/step/trainer.h"

namespace {

constexpr int kB = 2, kT = 8, kM = 4, kSteps = 3;
constexpr double kTolerance = 2e-5;  // relative to the loss, the norm and each gradient tensor's scale
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};

GPTConfig config() { return make_gpt_config(2, 4, 16, kT, 100); }

// Chapters of the text format ("A<n>:1 ", then tokens in [11, 100), then a newline: a chapter of
// c tokens is c + 6 inputs), six of 13, 0, 1, 0, 0 and 1 tokens: at maxT 8 the sequences of
// 8, 8, 3, 6, 7, 6, 6, 7 inputs, m B of them, microbatches of T 8, 6, 7, 7. Repeated 20 times, so
// that microbatch k + m reads what microbatch k reads.
const TokenDataset& documents() {
  static const TokenDataset data = [] {
    std::vector<uint16_t> block;
    uint64_t state = 7;
    int chapter = 0;
    for (int count : {13, 0, 1, 0, 0, 1}) {
      for (char c : "A" + std::to_string(++chapter) + ":1 ") block.push_back(uint16_t(c));
      for (int n = 0; n < count; ++n) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        block.push_back(uint16_t(11 + (state >> 33) % 89));
      }
      block.push_back(uint16_t('\n'));
    }
    TokenDataset d;
    for (int repeat = 0; repeat < 20; ++repeat) d.tokens.insert(d.tokens.end(), block.begin(), block.end());
    d.vocab_size = 100;
    d.source = "repeating chapters";
    return d;
  }();
  return data;
}

struct Outcome {
  std::vector<double> losses, norms;
  std::vector<int> lengths;        // step 1's, this replica's
  std::vector<float> gradients;    // after step 1, llm.c's layout (the rank's slices, zeros elsewhere)
  std::vector<float> final_model;  // gather_parameters after the last step (world rank 0's whole)
  ParameterLayout layout;
};

// sequence_parallel: --sequence-parallel, its lengths in multiples of tp.
Outcome train(const CommGroups& groups, bool sequence_parallel) {
  PipelineLayout layout{ScheduleKind::one_f_one_b, kM, 1, false, {}};
  layout.sequence_parallel = sequence_parallel;
  Trainer<float> trainer = create_trainer<float>(config(), kB, kT, layout, groups, MixedPrecision{true, 5});
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config(), 1234);
  upload_parameters(trainer, parameters);
  DocumentReader reader =
      make_document_reader(documents(), kB, kT, false, 1, sequence_parallel ? size_t(groups.mesh.tp) : 1);
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
  run.final_model = gather_parameters(trainer);
  run.layout = trainer.parameter_layout;
  destroy_trainer(trainer);
  return run;
}

Outcome train_on(int dp, int tp, int pp, bool sequence_parallel, Mesh* mesh = nullptr) {
  CommGroups groups = create_world_groups(dp * tp * pp == 1 ? make_mesh(1, 1, 1, 0)
                                                            : make_mesh(dp, tp, pp, 4, pipeline_harness::rank_in_world()));
  if (mesh) *mesh = groups.mesh;
  const Outcome run = train(groups, sequence_parallel);
  if (dp * tp * pp > 1) destroy_world_groups(groups);
  return run;
}

}  // namespace

TEST(TensorParallelVariableLength, SequenceParallelOnTwoTpRanksTimesTwoStagesGivesTheSingleProcessAndItsTwin) {
  if (pipeline_harness::size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Outcome single = train_on(1, 1, 1, false);
  Mesh mesh;
  const Outcome run = train_on(1, 2, 2, true, &mesh);
  const Outcome twin = train_on(2, 2, 1, true);

  EXPECT_EQ(single.lengths, (std::vector<int>{8, 6, 7, 7})) << "the test's data";
  EXPECT_EQ(run.lengths, (std::vector<int>{8, 6, 8, 8})) << "each T rounded up to a multiple of tp = 2";
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
        << parameter_tensor_name(r.tensor) << " layer " << r.layer << " on tp rank " << mesh.tp_rank;
  }
  EXPECT_EQ(run.losses, twin.losses) << "against 2 replicas of tp 2 x pp 1";
  EXPECT_EQ(run.norms, twin.norms) << "against 2 replicas of tp 2 x pp 1";
  if (mesh.world_rank == 0) EXPECT_EQ(run.final_model, twin.final_model) << "the model after the last step";
}
