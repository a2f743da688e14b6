// The layout check shared by the tensor-parallel layout tests (tests/mpi/tensor_parallel_layouts_test.cu,
// tests/mpi/sequence_parallel_layouts_test.cu): a case's run on a dp x tp x pp mesh against the
// single process of the same element type and global batch, which every rank runs itself, on a
// small GPT (L = 2, NH = 4, C = 16, T = 8, V = 100, Vp = 128, B = 2) for three clipped steps from
// the same initialisation. Checked (expect_layout_matches_single_process):
//  - the checkpoint's gather of the tp ranks' slices (trainer/checkpoints/gather_model.h) gives
//    back, on world rank 0, the uploaded model bitwise (in bf16 rounded to nearest, as the upload
//    rounds): every slice is placed where it was cut;
//  - the losses and the gradient norms (before clipping) of every step, and every gradient the
//    rank holds after step 1 (its slices cut from the single process's whole tensors), within
//    the tolerance below of the single process;
//  - every tp rank holds bitwise its tp rank 0's replicated tensors (wpe, the LayerNorms, lnf, the
//    row-parallel biases) after the last step, and every rank has bitwise the same norm;
//  - another schedule or recompute gives bitwise the losses and norms of 1F1B on the same mesh;
//  - a layout of one replica on pp > 1 stages gives bitwise the same tp's run on fewer stages
//    (pp 1 at -np 4; expect_bitwise_the_same_tp_on_half_the_stages says how).
// The tp = 1 layouts are PipelineLayouts' (bitwise the single process).
//
// The tolerance in fp32 (bf16's is with bf16_tolerance). tp > 1 adds partial sums in another
// order than one process: a row-parallel output adds tp partial sums of 4C/tp or C/tp products, a
// column-parallel input gradient tp partial sums over its outputs, the longest of them the head's
// input gradient over Vp = 128 columns; the loss's sum of exponentials runs per slice then over the ranks; the norm adds each
// slot's squares per slice then over tp. A sum of K terms rounded in fp32 is within K u of the
// terms' magnitudes (u = 2^-24): K = 128 gives 7.6e-6. So the gradients within 2e-5 of each
// tensor's scale (as TensorParallelGpt's), the losses and norms within 2e-5 relative: three AdamW
// steps of lr 3e-3 carry a gradient's relative error into the parameters as at most lr times it.
// Measured, CPU build, 2026-11-27: losses within 5.2e-8 (1.1e-8 relative), norms within 3.8e-8 (5e-8
// relative), gradients within 8.0e-7 of their scale; tp 2 x pp 4 (-np 8): losses within 8.1e-9
// relative, norms 2.4e-7 relative, gradients 6.9e-7 of their scale. The eleven cases of -np 4
// take 28 s (10 s before the comparison with fewer stages ran each tp 2 x pp 2 layout twice more:
// 16 s of it), the four of -np 8 24 s. A wrong slice, a sum over the whole wte or a replicated tensor counted tp times is off by the
// order of the values themselves.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cuda_bf16.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/host_exchange.h"
#include "comm/mesh.h"
#include "model/parameter_layout.h"
#include "pipeline/schedule_file.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/scaled_error.h"
#include "trainer/checkpoints/gather_model.h"
#include "trainer/step/trainer.h"

namespace tensor_parallel_layout_check {

constexpr int kB = 2, kT = 8, kSteps = 3;
// The global batch: 4 microbatches a step (each replica runs 4 / dp).
constexpr int kMicrobatches = 4;
// Relative to the single process's loss and norm, and to each gradient tensor's scale.
struct Tolerance {
  double loss, norm, gradient;
};
constexpr Tolerance kFloatTolerance{2e-5, 2e-5, 2e-5};
// bf16 (bf16 parameters, activations, gradients and messages; fp32 master weights, stochastic
// rounding keyed by each element's full-model index, so both runs round alike from the same
// master value): a row-parallel output is each tp rank's partial product rounded to bf16, then
// their sum rounded again, tp + 1 roundings of 2^-9 that one process's single GEMM output does not
// make, and a column-parallel input gradient likewise; each side rounds every microbatch's
// gradient into the bf16 sum. So a gradient differs by at most 2 m (tp + 1) 2^-9 of its scale
// (m = 4, tp = 2: 4.7e-2; tp = 4: 7.8e-2), and the norm, the same gradients' squares summed in fp32, by no more.
// The loss: step 1's forward differs by the row-parallel roundings, averaged over the m B T
// tokens; later steps also by the parameters a master weight's small difference moves across a
// rounding threshold, PipelineLayouts' bf16 bound of 2^-12 (tests/mpi/layouts_test.cu). Measured,
// CPU build, 2026-11-27, tp 2 x pp 2 and dp 2 x tp 2: gradients within 1.6e-2 of their scale,
// norms within 2.0e-3 relative, losses within 3.2e-5 relative (step 1: 1.1e-6); tp 4 (bound 7.8e-2):
// gradients within 1.6e-2, norms 5.8e-3, losses 3.5e-5 relative.
inline Tolerance bf16_tolerance(int tp) {
  const double gradient = 2 * kMicrobatches * (tp + 1) * std::ldexp(1.0, -9);
  return {std::ldexp(1.0, -12), gradient, gradient};
}
const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};  // every step clips (norms near 1)
constexpr double kLearningRate = 3e-3;

// What a case runs besides its mesh: the schedule, the model's layers (zb-v's two chunks a stage
// need 2 pp), recompute and the attention. The fused attention takes heads of 16 channels or more
// (kernels/fused_attention.cuh): its model has C = 64.
struct Case {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int layers = 2;
  bool recompute = false;
  AttentionKind attention = AttentionKind::materialized;
  int chunks = 1;  // chunks per stage of the interleaved schedule
  bool sequence_parallel = false;  // --sequence-parallel (tp > 1 only)
  bool from_schedule_file = false;  // the schedule's printed grid run as a --schedule-file
};

// V = 100: every tp rank's rows of wte hold real tokens (at V = 64 and tp 2, tp rank 1's would all be
// padding, zeros, which a lost slice would not change).
inline GPTConfig config(const Case& c) {
  return make_gpt_config(c.layers, 4, c.attention == AttentionKind::fused ? 64 : 16, kT, 100);
}

// Random tokens; repeating: the first kMicrobatches B T of them over and over, so that microbatch
// k + kMicrobatches reads what microbatch k reads (every step, and every replica, the same batch).
inline const TokenDataset& dataset(bool repeating = false) {
  static const auto make = [](bool repeat) {
    TokenDataset d;
    uint64_t state = 7;
    for (int i = 0; i < 4096; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      d.tokens.push_back(uint16_t((state >> 33) % 100));
    }
    const size_t period = kMicrobatches * kB * kT;
    if (repeat)
      for (size_t i = period; i < d.tokens.size(); ++i) d.tokens[i] = d.tokens[i % period];
    d.vocab_size = 100;
    d.source = repeat ? "repeating random tokens" : "random tokens";
    return d;
  };
  static const TokenDataset data = make(false), repeating_data = make(true);
  return repeating ? repeating_data : data;
}

inline std::vector<float> initial_parameters(const Case& c) {
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config(c), 1234);
  return parameters;
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<float> gradients;   // after step 1, llm.c's layout (the rank's slices, zeros elsewhere)
  std::vector<float> parameters;  // after the last step, the same
  std::vector<float> gathered;    // gather_parameters right after the upload (world rank 0's whole)
  std::vector<float> final_model;  // gather_parameters after the last step (world rank 0's whole)
  ParameterLayout layout;
};

template <typename Element>
Run train(const CommGroups& groups, int microbatches, const Case& c, const TokenDataset& data) {
  PipelineLayout layout{c.schedule, microbatches, c.chunks, c.recompute, {}};
  layout.attention = c.attention;
  layout.sequence_parallel = c.sequence_parallel;
  if (c.from_schedule_file) {  // as ./train --schedule-file, which leaves --schedule at its default
    const PipelineSchedule printed = make_pipeline_schedule(c.schedule, groups.mesh.pp, microbatches, c.chunks);
    layout.schedule_file = parse_schedule_grid(schedule_grid_text(printed));
    layout.schedule = ScheduleKind::one_f_one_b;
  }
  Trainer<Element> trainer = create_trainer<Element>(config(c), kB, kT, layout, groups, MixedPrecision{true, 5});
  upload_parameters(trainer, initial_parameters(c));
  Run run;
  run.gathered = gather_parameters(trainer);
  BatchReader reader = make_batch_reader(data, kB, kT, false, 1);
  for (int t = 1; t <= kSteps; ++t) {
    const StepResult step = train_step(trainer, reader, kSettings, kLearningRate, t);
    run.losses.push_back(step.loss);
    run.norms.push_back(step.grad_norm);
    if (t == 1) run.gradients = download_gradients(trainer);
  }
  run.parameters = download_parameters(trainer);
  run.final_model = gather_parameters(trainer);
  run.layout = trainer.parameter_layout;
  destroy_trainer(trainer);
  return run;
}

using pipeline_harness::rank_in_world;
using pipeline_harness::size_of_world;

// Every rank's values (the same count on each), in world rank order.
inline std::vector<float> all_gathered(const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * size_of_world());
  MPI_Allgather(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), int(mine.size()), MPI_FLOAT, MPI_COMM_WORLD);
  return all;
}

// The case's run on the mesh dp x tp x pp of the world (the single process: 1 x 1 x 1, 1F1B).
// microbatches: each replica's, 0 for kMicrobatches / dp (the global batch split over the replicas).
template <typename Element>
Run train_on(int dp, int tp, int pp, const Case& c, Mesh* mesh = nullptr, const TokenDataset& data = dataset(),
             int microbatches = 0) {
  CommGroups groups = create_world_groups(dp * tp * pp == 1 ? make_mesh(1, 1, 1, 0)
                                                            : make_mesh(dp, tp, pp, size_of_world(), rank_in_world()));
  if (mesh) *mesh = groups.mesh;
  const Run run = train<Element>(groups, microbatches > 0 ? microbatches : kMicrobatches / dp, c, data);
  if (dp * tp * pp > 1) destroy_world_groups(groups);
  return run;
}

// The "each fixed-tp layout bitwise equal to the same tp with pp = 1", in a world of 2 tp
// pp ranks: the layout (dp 1) against 2 replicas of the same tp on pp / 2 stages, 1F1B without
// recompute, each replica running the whole batch on the repeating data, so both replicas compute
// the same gradient, each scaled by 1 / (2 m B T) where one replica alone scales by 1 / (m B T): a
// power of two, exact, and the data-parallel sum of two equal halves is exact too. So the pair
// gives the single replica's numbers to the bit, and a difference is the layout's. At -np 4 (pp 2)
// the other run is tp-only (pp 1); at -np 8 (pp 4) it is pp 2, itself bitwise pp 1 by the -np 4
// cases. Checked: every step's loss and norm, and the whole model after the last step.
template <typename Element>
void expect_bitwise_the_same_tp_on_half_the_stages(int tp, int pp, const Case& c) {
  const TokenDataset& repeating = dataset(true);
  Mesh mesh;
  const Run layout = train_on<Element>(1, tp, pp, c, &mesh, repeating);
  Case plain = c;
  plain.schedule = ScheduleKind::one_f_one_b;
  plain.recompute = false;
  plain.chunks = 1;
  const Run fewer_stages = train_on<Element>(2, tp, pp / 2, plain, nullptr, repeating, kMicrobatches);
  EXPECT_EQ(layout.losses, fewer_stages.losses) << "against tp " << tp << " x pp " << pp / 2;
  EXPECT_EQ(layout.norms, fewer_stages.norms) << "against tp " << tp << " x pp " << pp / 2;
  if (mesh.world_rank == 0) {
    EXPECT_EQ(layout.final_model, fewer_stages.final_model) << "the model after the last step";
  }
}

// ran (if given): the case's run on the layout, for more checks.
template <typename Element>
void expect_layout_matches_single_process(int dp, int tp, int pp, const Case& c = {}, Run* ran = nullptr) {
  if (size_of_world() != dp * tp * pp) GTEST_SKIP() << "needs mpirun -np " << dp * tp * pp;
  Case single_case = c;
  single_case.schedule = ScheduleKind::one_f_one_b;
  single_case.chunks = 1;
  single_case.sequence_parallel = false;
  const Run single = train_on<Element>(1, 1, 1, single_case);
  Mesh mesh;
  const Run run = train_on<Element>(dp, tp, pp, c, &mesh);
  if (ran) *ran = run;
  const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;

  if (mesh.world_rank == 0) {
    std::vector<float> uploaded = initial_parameters(c);  // bf16: rounded to nearest by the upload
    if (bf16)
      for (float& p : uploaded) p = __bfloat162float(__float2bfloat16(p));
    EXPECT_EQ(run.gathered, uploaded) << "the checkpoint's gather of the slices";
  }
  const Tolerance tolerance = bf16 ? bf16_tolerance(tp) : kFloatTolerance;
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(run.losses[i], single.losses[i], tolerance.loss * single.losses[i]) << "loss, step " << i + 1;
    EXPECT_NEAR(run.norms[i], single.norms[i], tolerance.norm * single.norms[i]) << "gradient norm, step " << i + 1;
  }
  // The rank's gradients against the single process's, both cut to the rank's slices.
  const std::vector<float> mine = to_stage_layout(run.layout, run.gradients);
  const std::vector<float> want = to_stage_layout(run.layout, single.gradients);
  for (const ParameterRegion& r : run.layout.regions) {
    const std::vector<double> got(mine.begin() + r.offset, mine.begin() + r.offset + r.count);
    const std::vector<double> expected(want.begin() + r.offset, want.begin() + r.offset + r.count);
    EXPECT_LE(max_error_relative_to_scale(got, expected), tolerance.gradient)
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
  if (dp == 1 && pp > 1) expect_bitwise_the_same_tp_on_half_the_stages<Element>(tp, pp, c);
  if (c.schedule == ScheduleKind::one_f_one_b && !c.recompute) return;
  // Another schedule or recompute on the same mesh runs the same kernels and the same sums on
  // every microbatch: bitwise 1F1B's losses and norms without recompute, as at tp = 1 (and the
  // parameters a rank holds, where both place the same layers on it: zb-v's V and interleaved's chunks do not).
  Case plain = c;
  plain.schedule = ScheduleKind::one_f_one_b;
  plain.recompute = false;
  plain.chunks = 1;
  const Run one_f_one_b = train_on<Element>(dp, tp, pp, plain);
  EXPECT_EQ(run.losses, one_f_one_b.losses) << "against 1F1B on the same mesh";
  EXPECT_EQ(run.norms, one_f_one_b.norms) << "against 1F1B on the same mesh";
  if (placement_of(c.schedule, pp, 1).kind == PlacementKind::ring && c.chunks == 1) {
    EXPECT_EQ(run.parameters, one_f_one_b.parameters) << "against 1F1B on the same mesh";
  }
}

}  // namespace tensor_parallel_layout_check
