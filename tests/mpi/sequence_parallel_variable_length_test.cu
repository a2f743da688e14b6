// Sequence parallelism at variable length (issue 33 item 5 with issue 34): --sequence-parallel
// shards each microbatch's B T rows over the tp ranks, so with --documents every microbatch's T is
// rounded up to a multiple of tp, the rows padded (trainer/data/documents.h's length_multiple).
// Under mpirun -np 4, on document-aligned microbatches of T 8, 6, 7, 7 (tests/mpi/variable_length_check.h
// says what runs and what is checked against the single process, within what):
//  - tp 2 x pp 2 with it, 1F1B and zb-h1 (the split backward: I gathers what W reads, the
//    LayerNorms' gradients summed over tp per microbatch at the rounded lengths), T read as 8, 6, 8, 8:
//    within the tolerance of the single process, which runs the unrounded lengths, and bitwise its
//    fixed-tp twin, 2 replicas of tp 2 with it on one stage, 1F1B, each reading the whole batch (the
//    data repeats every m B sequences): the losses, the norms and the model after the last step
//    (tests/mpi/tensor_parallel_layout_check.h's expect_bitwise_the_same_tp_on_half_the_stages says
//    why two equal halves give the one replica's numbers to the bit);
//  - tp 4 with it, every T read as 8 (a shard of 2 rows a rank, whole shards of padding): within
//    the tolerance of the single process.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/mpi/variable_length_check.h"

using namespace variable_length_check;

namespace {

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

}  // namespace

// tp 2 x pp 2 with it under schedule: within the tolerance of the single process and bitwise its
// fixed-tp twin (2 replicas of tp 2 x pp 1 with it, 1F1B).
void expect_two_tp_ranks_times_two_stages_give_the_single_process_and_the_twin(ScheduleKind schedule) {
  if (pipeline_harness::size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Outcome single = train_on(1, 1, 1, documents());
  const Outcome run = train_on(1, 2, 2, documents(), {schedule, true});
  const Outcome twin = train_on(2, 2, 1, documents(), {ScheduleKind::one_f_one_b, true});

  EXPECT_EQ(single.lengths, (std::vector<int>{8, 6, 7, 7})) << "the test's data";
  EXPECT_EQ(run.lengths, (std::vector<int>{8, 6, 8, 8})) << "each T rounded up to a multiple of tp = 2";
  expect_within_tolerance_of_single_process(run, single);
  EXPECT_EQ(run.losses, twin.losses) << "against 2 replicas of tp 2 x pp 1";
  EXPECT_EQ(run.norms, twin.norms) << "against 2 replicas of tp 2 x pp 1";
  if (pipeline_harness::rank_in_world() == 0) {
    EXPECT_EQ(run.final_model, twin.final_model) << "the model after the last step";
  }
}

TEST(TensorParallelVariableLength, SequenceParallelOnTwoTpRanksTimesTwoStagesGivesTheSingleProcessAndItsTwin) {
  expect_two_tp_ranks_times_two_stages_give_the_single_process_and_the_twin(ScheduleKind::one_f_one_b);
}
TEST(TensorParallelVariableLength, SequenceParallelWithZeroBubbleH1OnTwoTpRanksTimesTwoStagesGivesTheSingleProcessAndItsTwin) {
  expect_two_tp_ranks_times_two_stages_give_the_single_process_and_the_twin(ScheduleKind::zb_h1);
}
TEST(TensorParallelVariableLength, SequenceParallelOnFourTpRanksGivesTheSingleProcess) {
  if (pipeline_harness::size_of_world() != 4) GTEST_SKIP() << "needs mpirun -np 4";
  const Outcome single = train_on(1, 1, 1, documents());
  const Outcome run = train_on(1, 4, 1, documents(), {ScheduleKind::one_f_one_b, true});

  EXPECT_EQ(run.lengths, (std::vector<int>{8, 8, 8, 8})) << "each T rounded up to a multiple of tp = 4";
  expect_within_tolerance_of_single_process(run, single);
}
