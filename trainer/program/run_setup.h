// What a training run is (RunSetup): decided by trainer/program/run.h's prepare_run, read by
// the step loop and the --print-schedule report (trainer/program/schedule_report.h).
#pragma once
#include <optional>
#include <vector>

#include "comm/mesh.h"
#include "model/gpt.cuh"
#include "trainer/checkpoints/save_and_resume.h"
#include "trainer/command_line/options.h"
#include "trainer/data/data.h"
#include "trainer/data/tokenizer.h"
#include "trainer/step/trainer.h"

// What a run is, decided and checked by each rank alone, before any communication, so that a
// bad layout fails on every rank at once with the same one-line message and nobody waits.
struct RunSetup {
  TrainOptions options;
  StartingPoint start;
  int B, T;
  TrainValSplit data;
  Mesh mesh;
  PipelineLayout layout;
  std::vector<LayerRange> virtual_stages;  // split_layers
  std::optional<Tokenizer> tokenizer;      // the samples' (trainer/safety/preflight.h), when samples are asked for
};

// What every microbatch's length is rounded up to, with --documents and the warm-up
// (trainer/data/documents.h): tp with --sequence-parallel, which shards each microbatch's B T rows
// over the tp ranks (T a multiple of tp, as --seq-len must be); else 1.
inline size_t length_multiple(const RunSetup& setup) {
  return setup.layout.sequence_parallel ? size_t(setup.mesh.tp) : 1;
}
