// --trace FILE: the measured timeline of one training step (the last, or --trace-step N) as
// Chrome trace-event JSON (pipeline/timeline.h), one track per stage, tp rank and replica, every
// schedule step an event with the start and duration the executor's CUDA events measured. A transfer
// group runs on its own stream and may overlap the computes beside it: the track then draws it
// between them and gives its measured times in its details, while its messages' arrows keep the
// measured times (measured_timeline.cpp says how). A compute is always drawn as measured; an
// overlapped pair's backward (DualPipeV), which ran on the executor's second compute stream, on
// the stage's second compute track, as the predicted trace draws it.
//
// The ranks' clocks: each rank's times are measured on its own device from one event, its
// timeline origin, recorded on its idle stream right after all ranks met at an MPI barrier (the
// stream drained first). The origins are then the same instant up to the barrier's exit skew:
// microseconds on an idle node, but up to 50 ms measured with 4 ranks on 2 loaded cores. Each rank
// also stamps when it entered the barrier, which bounds how late its origin can be; the writer
// moves each rank's times later by the least amount within that bound that makes every message's
// receive end at or after its send's start, and names the amounts in "otherData" (measured_timeline.cpp).
#pragma once
#include <string>

#include "pipeline/schedule.h"
#include "trainer/step/trainer.h"

// What start_measured_timeline measured on this rank: how long before its timeline origin it
// entered the barrier (the bound on how late its origin can be, above).
struct TimelineStart {
  double barrier_ms = -1;  // -1: not started
};

// Before the traced step, on every rank: waits for the stream, stamps its entry into a barrier of
// every rank, and records the executor's timeline origin at its exit.
template <typename Element>
TimelineStart start_measured_timeline(Trainer<Element>& trainer);

// After the traced step, on every rank: every rank's executed steps and times go to world rank 0,
// which writes the JSON to path (atomically: path.tmp, then a rename). schedule is the run's
// (every stage's steps: the flows follow its matching of sends and receives); about names the run
// (written as "otherData", with "loss": the step's loss, as --log writes it, which identifies the
// step apart from its label). Throws std::runtime_error naming the file when it cannot be written.
// step_begin: when schedule holds the steps before the traced one too (PipeDream's run, whose
// forwards take inputs received in the step before), where the traced step begins in each stage's
// list; its messages are the flows. Empty: the schedule is the traced step's.
template <typename Element>
void write_measured_timeline(const Trainer<Element>& trainer, const TimelineStart& start, const PipelineSchedule& schedule,
                             const std::string& path, const std::vector<std::pair<std::string, std::string>>& about,
                             double loss, const std::vector<size_t>& step_begin = {});
