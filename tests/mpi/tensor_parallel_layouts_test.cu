// The trainer at dp x tp x pp (issue 33, docs/pipeline.md "Tensor parallelism"): under mpirun
// -np 4, tp 2 x pp 2, tp 4 and dp 2 x tp 2 each train a small GPT (L = 2, NH = 4, C = 16, T = 8,
// V = 100, Vp = 128, B = 2, fp32, 1F1B) for three clipped steps from the same initialisation as
// the single process with the same global batch, which every rank runs itself. Checked:
//  - the checkpoint's gather of the tp ranks' slices (trainer/checkpoints/gather_model.h) gives
//    back, on world rank 0, the uploaded model bitwise: every slice is placed where it was cut;
//  - the losses and the gradient norms (before clipping) of every step, and every gradient the
//    rank holds after step 1 (its slices cut from the single process's whole tensors), within
//    the tolerance below of the single process;
//  - every tp rank holds bitwise its tp rank 0's replicated tensors (wpe, the LayerNorms, lnf, the
//    row-parallel biases) after the last step, and every rank has bitwise the same norm.
// The tp = 1 layouts are PipelineLayouts' (bitwise the single process).
//
// The tolerance. tp > 1 adds partial sums in another order than one process: a row-parallel
// output adds tp partial sums of 4C/tp or C/tp products, a column-parallel input gradient tp
// partial sums over its outputs, the longest of them the head's input gradient over Vp = 128
// columns; the loss's sum of exponentials runs per slice then over the ranks; the norm adds each
// slot's squares per slice then over tp. A sum of K terms rounded in fp32 is within K u of the
// terms' magnitudes (u = 2^-24): K = 128 gives 7.6e-6. So the gradients within 2e-5 of each
// tensor's scale (as TensorParallelGpt's), the losses and norms within 2e-5 relative: three AdamW
// steps of lr 3e-3 carry a gradient's relative error into the parameters as at most lr times it.
// Measured, CPU build, 2026-11-27: losses within 5.2e-8 (1.1e-8 relative), norms within 3.8e-8 (5e-8
// relative), gradients within 8.0e-7 of their scale. The three cases take 4 s under -np 4. A wrong slice, a sum over the whole wte or a replicated tensor counted tp times is off
// by the order of the values themselves.
#include <gtest/gtest.h>
#include <mpi.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/host_exchange.h"
#include "comm/mesh.h"
#include "model/parameter_layout.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/scaled_error.h"
#include "trainer/checkpoints/gather_model.h"
#include "trainer/step/trainer.h"

namespace {

constexpr int kB = 2, kT = 8, kSteps = 3;
constexpr double kTolerance = 2e-5;
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};  // every step clips (norms near 1)
constexpr double kLearningRate = 3e-3;

// V = 100: every tp rank's rows of wte hold real tokens (at V = 64 and tp 2, tp rank 1's would all be
// padding, zeros, which a lost slice would not change).
GPTConfig config() { return make_gpt_config(2, 4, 16, kT, 100); }

const TokenDataset& dataset() {
  static const TokenDataset data = [] {
    TokenDataset d;
    uint64_t state = 7;
    for (int i = 0; i < 4096; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      d.tokens.push_back(uint16_t((state >> 33) % 100));
    }
    d.vocab_size = 100;
    d.source = "random tokens";
    return d;
  }();
  return data;
}

std::vector<float> initial_parameters() {
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config(), 1234);
  return parameters;
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<float> gradients;   // after step 1, llm.c's layout (the rank's slices, zeros elsewhere)
  std::vector<float> parameters;  // after the last step, the same
  std::vector<float> gathered;    // gather_parameters right after the upload (world rank 0's whole)
  ParameterLayout layout;
};

Run train(const CommGroups& groups, int microbatches) {
  const PipelineLayout layout{ScheduleKind::one_f_one_b, microbatches, 1, false, {}};
  Trainer<float> trainer = create_trainer<float>(config(), kB, kT, layout, groups);
  upload_parameters(trainer, initial_parameters());
  Run run;
  run.gathered = gather_parameters(trainer);
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  for (int t = 1; t <= kSteps; ++t) {
    const StepResult step = train_step(trainer, reader, kSettings, kLearningRate, t);
    run.losses.push_back(step.loss);
    run.norms.push_back(step.grad_norm);
    if (t == 1) run.gradients = download_gradients(trainer);
  }
  run.parameters = download_parameters(trainer);
  run.layout = trainer.parameter_layout;
  destroy_trainer(trainer);
  return run;
}

using pipeline_harness::rank_in_world;
using pipeline_harness::size_of_world;

// Every rank's values (the same count on each), in world rank order.
std::vector<float> all_gathered(const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * size_of_world());
  MPI_Allgather(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), int(mine.size()), MPI_FLOAT, MPI_COMM_WORLD);
  return all;
}

void expect_layout_matches_single_process(int dp, int tp, int pp) {
  if (size_of_world() != dp * tp * pp) GTEST_SKIP() << "needs mpirun -np " << dp * tp * pp;
  const int microbatches = 4;  // the global batch; each replica runs microbatches / dp
  const Run single = train(create_world_groups(make_mesh(1, 1, 1, 0)), microbatches);
  CommGroups groups = create_world_groups(make_mesh(dp, tp, pp, size_of_world(), rank_in_world()));
  const Mesh mesh = groups.mesh;
  const Run run = train(groups, microbatches / dp);
  destroy_world_groups(groups);

  if (mesh.world_rank == 0) {
    EXPECT_EQ(run.gathered, initial_parameters()) << "the checkpoint's gather of the slices";
  }
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(run.losses[i], single.losses[i], kTolerance * single.losses[i]) << "loss, step " << i + 1;
    EXPECT_NEAR(run.norms[i], single.norms[i], kTolerance * single.norms[i]) << "gradient norm, step " << i + 1;
  }
  // The rank's gradients against the single process's, both cut to the rank's slices.
  const std::vector<float> mine = to_stage_layout(run.layout, run.gradients);
  const std::vector<float> want = to_stage_layout(run.layout, single.gradients);
  for (const ParameterRegion& r : run.layout.regions) {
    const std::vector<double> got(mine.begin() + r.offset, mine.begin() + r.offset + r.count);
    const std::vector<double> expected(want.begin() + r.offset, want.begin() + r.offset + r.count);
    EXPECT_LE(max_error_relative_to_scale(got, expected), kTolerance)
        << parameter_tensor_name(r.tensor) << " layer " << r.layer << " on tp rank " << mesh.tp_rank;
  }
  // Replicated tensors bitwise their tp rank 0's; the norm bitwise every rank's.
  const std::vector<float> every = all_gathered(run.parameters);
  const size_t n = run.parameters.size();
  const float* own = every.data() + size_t(mesh.world_rank) * n;
  const float* first = every.data() + size_t(world_rank_of(mesh, mesh.dp_rank, mesh.pp_rank, 0)) * n;
  const auto same_bits = [](float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  for (const ParameterRegion& r : run.layout.regions) {
    if (!replicated_on_tp_ranks(r.tensor)) continue;
    for (size_t i = 0; i < r.count; ++i)
      if (!same_bits(own[r.full_offset + i], first[r.full_offset + i])) {
        ADD_FAILURE() << parameter_tensor_name(r.tensor) << " layer " << r.layer << " on tp rank " << mesh.tp_rank
                      << " differs from tp rank 0's at " << i;
        break;
      }
  }
  const std::vector<float> norms = all_gathered({float(run.norms.back())});
  for (float norm : norms) EXPECT_TRUE(same_bits(norm, norms[0])) << "the gradient norm differs between ranks";
}

}  // namespace

TEST(TensorParallelLayouts, TwoTpRanksTimesTwoStagesGiveTheSingleProcess) { expect_layout_matches_single_process(1, 2, 2); }
TEST(TensorParallelLayouts, FourTpRanksGiveTheSingleProcess) { expect_layout_matches_single_process(1, 4, 1); }
TEST(TensorParallelLayouts, TwoReplicasOfTwoTpRanksGiveTheSingleProcess) {
  expect_layout_matches_single_process(2, 2, 1);
}
