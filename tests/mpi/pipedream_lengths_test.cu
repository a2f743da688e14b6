// PipeDream's asynchronous pipeline with microbatches of different lengths (issue 34's documents and
// sequence-length warm-up) on every rank of the world, one stage each (p = 2, 4 or 8 by mpirun's
// -np), or replicas of two stages: each step's loss and the parameters after the last update
// bitwise equal to the one-process reference (tests/pipedream_reference.h) given the same lengths.
// A microbatch in flight at a step's end keeps its T into the next step, and stage 0's forwards
// read ahead at the next step's cap: a stage that took maxT, another microbatch's T or the wrong
// step's cap would move the bits, or the CPU NCCL's check (tools/run_tests.sh runs this suite with
// it) names the two counts of a message. Kept in the PipelineLayouts suite for those modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/pipedream.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/pipedream_reference.h"

namespace {

using namespace pipeline_harness;

const AdamWSettings kUnclipped{0.9, 0.95, 1e-8, 0.1, 0.0};
constexpr int kLayers = 8, kM = 4, kSteps = 3;
// The warm-up's caps over the 3 steps: 4, 4, then 8 (step 2 reads step 3's first microbatches
// ahead at 8 while its own are at 4).
const SeqLenWarmup kWarmup{4, size_t(kT), 2, 1};

// Documents need a vocabulary above the chapters' letters (pipeline_harness.h's config_of_case).
GPTConfig config_of_lengths() { return make_gpt_config(kLayers, 2, 16, kT, 128); }

struct Lengths {
  bool documents = false;
  bool warmup = false;
};

void expect_reference(const PipeDreamRule& rule, int dp, int p, const Lengths& lengths) {
  WorldGroups world(dp, p);
  SCOPED_TRACE("dp " + std::to_string(dp) + " p " + std::to_string(p) + " K " + std::to_string(rule.update_every) +
               (lengths.documents ? " documents" : "") + (lengths.warmup ? " warm-up" : ""));
  const GPTConfig config = config_of_lengths();
  const TokenDataset& data = lengths.documents ? documents() : dataset();
  pipedream_reference::Lengths reference_lengths;
  if (lengths.documents) reference_lengths.documents = make_document_reader(data, kB, kT, false, 1);
  for (int t = 0; t < kSteps; ++t)
    reference_lengths.caps.push_back(lengths.warmup ? warmup_seq_len(kWarmup, uint64_t(t)) : size_t(kT));
  const pipedream_reference::Run expected = pipedream_reference::run(
      config, kB, kT, p, kM, kSteps, rule, kUnclipped, kLearningRate, initial_parameters(config),
      make_batch_reader(data, kB, kT, false, 1), dp, {}, {}, {}, reference_lengths);

  PipelineLayout layout{ScheduleKind::one_f_one_b, kM, 1, false, {}};
  layout.pipedream = PipeDreamLayout{rule, kSteps};
  Trainer<float> trainer = create_trainer<float>(config, kB, kT, layout, world.groups);
  if (lengths.warmup) trainer.warmup = kWarmup;
  upload_parameters(trainer, initial_parameters(config));
  BatchReader packed = make_batch_reader(data, kB, kT, false, 1);
  std::optional<DocumentReader> reader;
  if (lengths.documents) reader = make_document_reader(data, kB, kT, false, 1);
  std::vector<double> losses;
  for (int t = 1; t <= kSteps; ++t) {
    const size_t cap = reference_lengths.caps[size_t(t - 1)];
    losses.push_back(reader ? train_step(trainer, *reader, cap, kUnclipped, kLearningRate, t).loss
                                       : train_step(trainer, packed, cap, kUnclipped, kLearningRate, t).loss);
  }
  const std::vector<float> parameters = download_parameters(trainer);
  const std::vector<ParameterRegion> regions = stage_regions(trainer, world.groups.mesh.pp_rank);
  destroy_trainer(trainer);
  EXPECT_EQ(losses, expected.losses);
  for (const ParameterRegion& r : regions)
    EXPECT_TRUE(std::equal(parameters.begin() + r.full_offset, parameters.begin() + r.full_offset + r.count,
                           expected.parameters.begin() + r.full_offset))
        << parameter_tensor_name(r.tensor) << (r.tied_copy ? " (the tied copy)" : "") << " at " << r.full_offset
        << " differs from the reference's after the last update";
}

// Every rank a stage: documents (each microbatch its own T of 6, 7 or 8, most with padding), with
// an update every microbatch and every two (two updates of a step, each over its own real targets).
TEST(PipelineLayouts, PipeDreamWithDocumentsGivesTheReference) {
  expect_reference({1, true, false}, 1, size_of_world(), {true, false});
  expect_reference({2, true, false}, 1, size_of_world(), {true, false});
}
// The warm-up's caps, packed and with documents: the microbatches read ahead take the next step's.
TEST(PipelineLayouts, PipeDreamWithSeqLenWarmupGivesTheReference) {
  expect_reference({1, true, false}, 1, size_of_world(), {false, true});
  expect_reference({1, true, true}, 1, size_of_world(), {true, true});
}
// Replicas of two stages, or at -np 2 two replicas of one stage: an update's real targets are
// every replica's.
TEST(PipelineLayouts, PipeDreamReplicasWithDocumentsGiveTheReference) {
  const int pp = size_of_world() >= 4 ? 2 : 1;
  expect_reference({1, true, false}, size_of_world() / pp, pp, {true, false});
}

}  // namespace
