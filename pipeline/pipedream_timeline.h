// The predicted timeline of PipeDream's asynchronous pipeline (pipeline/pipedream.h) as Chrome trace
// JSON's events (pipeline/timeline.h): what `./train --schedule pipedream --print-schedule --trace
// FILE` writes. The simulator (pipeline/simulate.h) runs the run's lists of the first steps, with
// their sends and receives (pipedream_run_schedules): one 1F1B for all of them, no flush between
// steps, so a steady step has no idle where 1F1B's has (p - 1) / (m + p - 1).
//
// Each compute's event carries the weight version it uses ("weights v2"), and each update is an
// event of its own, "U2" (category "update"), on the stage's compute track where the rule puts it:
// right after the backward that completes it, or with vertical sync right before its first use.
// An update costs nothing in this model: --schedule-costs has no term for AdamW, so the update's
// event has no duration and moves no other event (docs/pipeline.md says what it would add).
#pragma once

#include "pipeline/pipedream.h"
#include "pipeline/timeline.h"

// The timeline of `steps` steps of m microbatches at p stages, one unit of costs = unit_us.
Timeline pipedream_predicted_timeline(const PipeDreamRule& rule, int p, int m, int steps, const StepCosts& costs,
                                      double unit_us);
