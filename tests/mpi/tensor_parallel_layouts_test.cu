// The trainer at dp x tp x pp (issue 33, docs/pipeline.md "Tensor parallelism"), each layout
// against the single process (tests/mpi/tensor_parallel_layout_check.h says what is checked and
// within what): under mpirun -np 2, tp 2; under mpirun -np 4, tp 2 x pp 2, tp 4 and dp 2 x tp 2 in fp32, and tp 2 x pp 2 and
// dp 2 x tp 2 in bf16, 1F1B; tp 2 x pp 2 with zb-h1, zb-v and dualpipev (L = 4), recompute and the
// fused attention (C = 64), and, under -np 8, dp 2 x tp 2 x pp 2 and tp 2 x pp 4 with the
// interleaved schedule (2 chunks a stage, L = 8), zb-h1 (L = 4) and zb-v (L = 8). With
// --sequence-parallel: tests/mpi/sequence_parallel_layouts_test.cu.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include "tests/mpi/tensor_parallel_layout_check.h"

using namespace tensor_parallel_layout_check;

TEST(TensorParallelLayouts, TwoTpRanksTimesTwoStagesGiveTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2);
}
TEST(TensorParallelLayouts, FourTpRanksGiveTheSingleProcess) { expect_layout_matches_single_process<float>(1, 4, 1); }
// tp 2 alone, under mpirun -np 2 (tools/run_tests.sh's np 2 mode; -np 4 leaves it out).
TEST(TensorParallelLayouts, TwoTpRanksGiveTheSingleProcess) { expect_layout_matches_single_process<float>(1, 2, 1); }
TEST(TensorParallelLayouts, TwoReplicasOfTwoTpRanksGiveTheSingleProcess) {
  expect_layout_matches_single_process<float>(2, 2, 1);
}
// The zero-bubble schedules split each backward into I (the column-parallel input gradients'
// all-reduces) and W (no communication); zb-v runs two chunks a stage in a V, on 4 layers.
TEST(TensorParallelLayouts, ZeroBubbleH1OnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, {ScheduleKind::zb_h1});
}
TEST(TensorParallelLayouts, ZeroBubbleVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, {ScheduleKind::zb_v, 4});
}
// A recomputed forward issues the same tp all-reduces as the first, on every tp rank alike.
TEST(TensorParallelLayouts, RecomputeOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, {ScheduleKind::one_f_one_b, 2, true});
}
// The fused attention on NH / tp heads of C / tp channels (heads of 16), with recompute and with
// zb-h1's split backward (its I runs the fused attention's backward).
TEST(TensorParallelLayouts, FusedAttentionOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, {ScheduleKind::zb_h1, 2, true, AttentionKind::fused});
}
// DualPipeV's overlapped pairs: a pair's backward issues its tp all-reduces on the second compute
// stream, after the forward's in the rank's one NCCL order (comm/nccl_order.h), alike on every tp
// rank.
TEST(TensorParallelLayouts, DualPipeVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 2, {ScheduleKind::dual_pipe_v, 4});
}
// Every axis at once, under mpirun -np 8 (tools/run_tests.sh's np 8 mode; -np 4 leaves it out).
TEST(TensorParallelLayouts, TwoReplicasOfTwoTpRanksTimesTwoStagesGiveTheSingleProcess) {
  expect_layout_matches_single_process<float>(2, 2, 2);
}
// tp 2 x pp 4, under mpirun -np 8 (tools/run_tests.sh's np 8 mode; -np 4 leaves them out): the
// interleaved schedule (2 chunks a stage), zb-h1 and zb-v (2 chunks a stage in a V), on 8, 4 and 8
// layers.
TEST(TensorParallelLayouts, InterleavedOnTwoTpRanksTimesFourStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 4, {ScheduleKind::interleaved, 8, false,
                                                        AttentionKind::materialized, 2});
}
TEST(TensorParallelLayouts, ZeroBubbleH1OnTwoTpRanksTimesFourStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 4, {ScheduleKind::zb_h1, 4});
}
TEST(TensorParallelLayouts, ZeroBubbleVOnTwoTpRanksTimesFourStagesGivesTheSingleProcess) {
  expect_layout_matches_single_process<float>(1, 2, 4, {ScheduleKind::zb_v, 8});
}
TEST(TensorParallelLayouts, TwoTpRanksTimesTwoStagesInBf16GiveTheSingleBf16Process) {
  expect_layout_matches_single_process<__nv_bfloat16>(1, 2, 2);
}
TEST(TensorParallelLayouts, FourTpRanksInBf16GiveTheSingleBf16Process) {
  expect_layout_matches_single_process<__nv_bfloat16>(1, 4, 1);
}
TEST(TensorParallelLayouts, TwoReplicasOfTwoTpRanksInBf16GiveTheSingleBf16Process) {
  expect_layout_matches_single_process<__nv_bfloat16>(2, 2, 1);
}
