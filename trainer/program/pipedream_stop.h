// A stop signal under --schedule pipedream (docs/pipeline.md, "Checkpoints"). A checkpoint is saved
// with the pipeline drained, and a step's end is not drained unless its lists were cut there: after
// the step that saw the signal, stages hold microbatches in flight and weights of several versions.
// So a run with --save goes on to the first step whose end can drain without changing the steps
// already run (pipeline/pipedream.h's pipedream_stop_drain: the next step when m >= p - 1), cuts
// every stage's lists there, as --save-every's drains are cut, and saves and stops after it: one
// more step's work (m microbatches), where stopping at once would lose every step since the last
// save. Every rank sees the same signal after the same step (the step's sum over the world) and
// cuts alike. Without --save nothing is to be saved: the run stops at once, as the synchronous
// schedules do.
#pragma once
#include <cstdio>

#include "trainer/program/run_setup.h"
#include "trainer/step/trainer.h"

struct PipeDreamStop {
  int signal = 0;  // the stop signal seen (SIGTERM, SIGINT); 0: none yet
  int step = 0;    // the step of the whole run (1, 2, ...) after which the pipeline drains for it
};

// After step `step` of the whole run, whose sum over the world saw `signal` (0: none): the signal
// to stop with after this step, 0 to go on. On the first signal of a pipedream run with --save
// before a drain, cuts trainer's lists at the drain and says so on out (when not null) in one line.
template <typename Element>
int pipedream_stop_signal(PipeDreamStop& stop, const RunSetup& setup, Trainer<Element>& trainer, int step, int signal,
                          std::FILE* out);
