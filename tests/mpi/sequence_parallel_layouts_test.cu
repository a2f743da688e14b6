// The trainer with --sequence-parallel (issue 33, docs/pipeline.md "Sequence parallelism") on
// dp x tp x pp layouts, each against the single process (tests/mpi/tensor_parallel_layout_check.h
// says what is checked and within what) and more (expect_sequence_parallel_layout): tp 2 under
// -np 2, tp 2 x pp 2 and tp 4 under -np 4, dp 2 x tp 2 x pp 2 under -np 8; the split backward's schedules (zb-h1,
// zb-v, dualpipev) and bf16 at tp 2 x pp 2, and zb-h1, zb-v and the interleaved schedule at tp 2 x
// pp 4 (-np 8), each within the
// tolerance of the single process and bitwise the same tp with it on fewer stages (its fixed-tp
// twin) and the same mesh's 1F1B; schedule files bitwise the built-in schedules with it.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <vector>

#include "tests/mpi/tensor_parallel_layout_check.h"

using namespace tensor_parallel_layout_check;

namespace {

// Sequence parallelism (--sequence-parallel; model/gpt_sequence_parallel.cu) on a layout: within
// the fp32 tolerance of the single process (its one new order, each LayerNorm gradient summed over a
// rank's B T / tp rows then over tp, adds K = B T / tp + tp <= 10 terms at B T = 16: K u = 6.0e-7), and
// bitwise the same tp with it on half the stages (expect_layout_matches_single_process). Against the
// same layout without it at tp 2: step 1's loss bitwise and step 1's gradients bitwise but for the
// LayerNorms', which are within the tolerance (a reduce-scatter adds the same partial products as
// the all-reduce, and two terms have one sum in any order, whatever order NCCL takes); at tp 4,
// where NCCL promises no order of four terms, all within the tolerance. Later steps differ
// through the LayerNorms.
void expect_sequence_parallel_layout(int dp, int tp, int pp) {
  if (size_of_world() != dp * tp * pp) GTEST_SKIP() << "needs mpirun -np " << dp * tp * pp;
  Case c;
  c.sequence_parallel = true;
  Run with;
  expect_layout_matches_single_process<float>(dp, tp, pp, c, &with);
  const Run without = train_on<float>(dp, tp, pp, {});
  const bool two_terms = tp == 2;
  if (two_terms)
    EXPECT_EQ(with.losses[0], without.losses[0]) << "step 1's loss against the same layout without sequence parallelism";
  else
    EXPECT_LE(std::abs(with.losses[0] - without.losses[0]), kFloatTolerance.loss * std::abs(without.losses[0]))
        << "step 1's loss against the same layout without sequence parallelism";
  const std::vector<float> mine = to_stage_layout(with.layout, with.gradients);
  const std::vector<float> plain = to_stage_layout(with.layout, without.gradients);
  for (const ParameterRegion& r : with.layout.regions) {
    const std::vector<double> got(mine.begin() + r.offset, mine.begin() + r.offset + r.count);
    const std::vector<double> expected(plain.begin() + r.offset, plain.begin() + r.offset + r.count);
    const bool layernorm = r.tensor == kLn1w || r.tensor == kLn1b || r.tensor == kLn2w || r.tensor == kLn2b ||
                           r.tensor == kLnfw || r.tensor == kLnfb;
    if (layernorm || !two_terms)
      EXPECT_LE(max_error_relative_to_scale(got, expected), kFloatTolerance.gradient)
          << parameter_tensor_name(r.tensor) << " layer " << r.layer;
    else
      EXPECT_EQ(got, expected) << parameter_tensor_name(r.tensor) << " layer " << r.layer
                               << ": against the same layout without sequence parallelism";
  }
}


}  // namespace

// --sequence-parallel at tp 2 x pp 2 and tp 4 (-np 4), dp 2 x tp 2 x pp 2 (-np 8 only), tp 2 (-np 2 only).
TEST(TensorParallelLayouts, SequenceParallelOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_sequence_parallel_layout(1, 2, 2);
}
TEST(TensorParallelLayouts, SequenceParallelOnFourTpRanksGivesTheSingleProcess) {
  expect_sequence_parallel_layout(1, 4, 1);
}
// tp 2 alone, under mpirun -np 2 (tools/run_tests.sh's np 2 mode; -np 4 leaves it out).
TEST(TensorParallelLayouts, SequenceParallelOnTwoTpRanksGivesTheSingleProcess) {
  expect_sequence_parallel_layout(1, 2, 1);
}
TEST(TensorParallelLayouts, SequenceParallelOnTwoReplicasOfTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_sequence_parallel_layout(2, 2, 2);
}

// The split backward with it (model/gpt_split_backward_sequence_parallel.cu): I gathers what W
// reads and sums the LayerNorms' gradients over tp, W adds them and communicates nothing. Bitwise
// 1F1B with it on the same mesh and its fixed-tp twin: the same kernels and the same collectives
// on the same values. zb-v and dualpipev run two chunks a stage in a V, on 4 layers; dualpipev's
// pairs issue a forward's gathers and a backward's collectives on two streams in the rank's one
// NCCL order.
Case sequence_parallel(ScheduleKind schedule, int layers) {
  Case c{schedule, layers};
  c.sequence_parallel = true;
  return c;
}
TEST(TensorParallelLayouts, SequenceParallelWithZeroBubbleH1OnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, sequence_parallel(ScheduleKind::zb_h1, 2));
}
TEST(TensorParallelLayouts, SequenceParallelWithZeroBubbleVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, sequence_parallel(ScheduleKind::zb_v, 4));
}
TEST(TensorParallelLayouts, SequenceParallelWithDualPipeVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, sequence_parallel(ScheduleKind::dual_pipe_v, 4));
}
// tp 2 x pp 4 with it and zb-h1 on 4 layers, under mpirun -np 8 (tools/run_tests.sh's np 8 mode,
// whose *FourStages* it matches): I and W of one layer a stage, the messages of 3 boundaries the
// rank's shard; bitwise its fixed-tp twin on 2 stages and 1F1B with it on the same mesh.
TEST(TensorParallelLayouts, SequenceParallelWithZeroBubbleH1OnTwoTpRanksTimesFourStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 4, sequence_parallel(ScheduleKind::zb_h1, 4));
}
// The same mesh with it and zb-v (two chunks a stage in a V, L = 8: stage 0 holds the embedding and
// the head, its two chunks' shards crossing at the V's turn on stage 3) and with the interleaved
// schedule (2 chunks a stage, L = 8: chunk 0 of the last stage hands its shard to chunk 1 of stage
// 0); each bitwise its fixed-tp twin and 1F1B with it on the same mesh.
TEST(TensorParallelLayouts, SequenceParallelWithZeroBubbleVOnTwoTpRanksTimesFourStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 4, sequence_parallel(ScheduleKind::zb_v, 8));
}
TEST(TensorParallelLayouts, SequenceParallelWithInterleavedOnTwoTpRanksTimesFourStagesGivesTheSingleProcess) {
  Case c = sequence_parallel(ScheduleKind::interleaved, 8);
  c.chunks = 2;
  expect_layout_matches_single_process<float>(1, 2, 4, c);
}
// In bf16, within bf16_tolerance(2) of the single bf16 process: a LayerNorm gradient, each rank's
// sum over its rows rounded to bf16, then their sum over tp rounded again, makes the tp + 1
// roundings of a row-parallel output, which that bound already counts; bitwise its fixed-tp twin.
TEST(TensorParallelLayouts, SequenceParallelInBf16OnTwoTpRanksTimesTwoStagesGivesTheSingleBf16Process) {
  expect_layout_matches_single_process<__nv_bfloat16>(1, 2, 2, sequence_parallel(ScheduleKind::one_f_one_b, 2));
}
// A --schedule-file with it: the printed grid of 1F1B and of zb-v (a split backward in a V, its
// placement line read back) at tp 2 x pp 2 give bitwise the built-in schedule with it: the losses,
// the norms, step 1's gradients and the parameters after the last step (a file is lowered to its
// transfers anew, but runs the same computes on the same ranks in the same order).
void expect_schedule_file_gives_the_built_in(ScheduleKind schedule, int layers) {
  if (size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Case built_in = sequence_parallel(schedule, layers);
  Case from_file = built_in;
  from_file.from_schedule_file = true;
  const Run expected = train_on<float>(1, 2, 2, built_in);
  const Run got = train_on<float>(1, 2, 2, from_file);
  EXPECT_EQ(got.losses, expected.losses);
  EXPECT_EQ(got.norms, expected.norms);
  EXPECT_EQ(got.gradients, expected.gradients);
  EXPECT_EQ(got.parameters, expected.parameters);
}
TEST(TensorParallelLayouts, SequenceParallelWithOneFOneBFromAScheduleFileGivesTheBuiltIn) {
  expect_schedule_file_gives_the_built_in(ScheduleKind::one_f_one_b, 2);
}
TEST(TensorParallelLayouts, SequenceParallelWithZeroBubbleVFromAScheduleFileGivesTheBuiltIn) {
  expect_schedule_file_gives_the_built_in(ScheduleKind::zb_v, 4);
}
