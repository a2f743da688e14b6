// The run and the comparison shared by the variable-length tests at tp > 1
// (tests/mpi/tensor_parallel_variable_length_test.cu, tests/mpi/sequence_parallel_variable_length_test.cu):
// a small GPT (L = 2, NH = 4, C = 16, maxT = 8, V = 100, Vp = 128, B = 2, m = 4) trained for three
// clipped steps on document-aligned microbatches (trainer/data/documents.h), each at its own T with
// padding, on a dp x tp x pp mesh of the world, with a schedule, with or without
// --sequence-parallel (its lengths then rounded up to a multiple of tp); and the check of a run
// against the single process over the same data, which every rank runs itself: the losses and the
// gradient norms of every step, and every gradient the rank holds after step 1 (its slices cut
// from the single process's tensors), within TensorParallelLayouts' fp32 tolerance
// (tests/mpi/tensor_parallel_layout_check.h: tp's partial sums in another order, at most 128
// terms, K u = 7.6e-6 of their scale; with sequence parallelism each LayerNorm gradient summed over
// a rank's B T / tp rows then over tp adds K = B T / tp + tp <= 10 more; bound 2e-5). Padding rows
// carry no target, so they add exact zeros to every gradient.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "comm/mesh.h"
#include "model/parameter_layout.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/scaled_error.h"
#include "trainer/checkpoints/gather_model.h"
#include "trainer/data/documents.h"
#include "trainer/step/trainer.h"

namespace variable_length_check {

constexpr int kB = 2, kT = 8, kM = 4, kSteps = 3;
constexpr double kTolerance = 2e-5;  // relative to the loss, the norm and each gradient tensor's scale
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};

inline GPTConfig config() { return make_gpt_config(2, 4, 16, kT, 100); }

// What a run uses besides its mesh and its data.
struct Case {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  bool sequence_parallel = false;  // --sequence-parallel, its lengths in multiples of tp
};

struct Outcome {
  std::vector<double> losses, norms;
  std::vector<int> lengths;        // step 1's, this replica's
  std::vector<float> gradients;    // after step 1, llm.c's layout (the rank's slices, zeros elsewhere)
  std::vector<float> final_model;  // gather_parameters after the last step (world rank 0's whole)
  ParameterLayout layout;
  int tp_rank = 0;
};

inline Outcome train(const CommGroups& groups, const TokenDataset& documents, const Case& c) {
  PipelineLayout layout{c.schedule, kM, 1, false, {}};
  layout.sequence_parallel = c.sequence_parallel;
  Trainer<float> trainer = create_trainer<float>(config(), kB, kT, layout, groups, MixedPrecision{true, 5});
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config(), 1234);
  upload_parameters(trainer, parameters);
  DocumentReader reader =
      make_document_reader(documents, kB, kT, false, 1, c.sequence_parallel ? size_t(groups.mesh.tp) : 1);
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
  run.tp_rank = groups.mesh.tp_rank;
  destroy_trainer(trainer);
  return run;
}

// The case on the mesh dp x tp x pp of the world (the single process: 1 x 1 x 1).
inline Outcome train_on(int dp, int tp, int pp, const TokenDataset& documents, const Case& c = {}) {
  const bool single = dp * tp * pp == 1;
  CommGroups groups = create_world_groups(single ? make_mesh(1, 1, 1, 0)
                                                 : make_mesh(dp, tp, pp, pipeline_harness::size_of_world(),
                                                             pipeline_harness::rank_in_world()));
  const Outcome run = train(groups, documents, c);
  if (!single) destroy_world_groups(groups);
  return run;
}

inline void expect_within_tolerance_of_single_process(const Outcome& run, const Outcome& single) {
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
        << parameter_tensor_name(r.tensor) << " layer " << r.layer << " on tp rank " << run.tp_rank;
  }
}

}  // namespace variable_length_check
