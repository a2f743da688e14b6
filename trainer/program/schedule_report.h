// What `./train --print-schedule` prints: the schedule's grid, the simulators' timeline and
// idle shares, and each stage's activation memory as the executor will allocate it; and the
// names of the run's schedule and chunks that the banner and the traces share.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/gpt.cuh"
#include "trainer/program/run_setup.h"

// "1f1b schedule", "interleaved schedule, microbatch group 2", "the schedule of FILE".
std::string schedule_title(const RunSetup& setup);
// "layers [0, 3) + embedding": what a chunk computes.
std::string layers_text(const LayerRange& range);
// A trace's description of the run, written as its "otherData".
std::vector<std::pair<std::string, std::string>> trace_about(const RunSetup& setup, const std::string& what);

// The chosen schedule's grid for every stage, its timeline and the simulator's predicted idle
// share and activation memory per stage (each chunk's peak slots x its slot bytes, plus with split
// backwards its peak weight-gradient-input buffers x their bytes: what the executor allocates), at
// --schedule-costs (by default t_f = t_i = t_w, so B = 2 t_f, no latency); and, where it differs,
// the prediction with transfers that do not hold the compute stream (pipeline/simulate.h's
// simulate_dataflow). With --format pytorch-csv: only the schedule as PyTorch's compute-only CSV
// (pipeline/pytorch_csv.h).
std::string schedule_report(const RunSetup& setup);
// The simulator's timeline of the schedule at --schedule-costs as Chrome trace JSON
// (--print-schedule --trace FILE; pipeline/timeline.h), one unit of cost = 1 ms.
std::string predicted_timeline_json(const RunSetup& setup);
