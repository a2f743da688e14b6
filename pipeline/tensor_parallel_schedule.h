// Which schedules run at tp > 1 (issue 33): all but the overlapped pairs (DualPipeV), whose
// backward would issue the tp group's collectives on a second compute stream, beside the
// forward's, in an order the two streams do not fix. The split backward (I and W, the zero-bubble
// schedules) runs: I holds the column-parallel layers' all-reduces, W communicates nothing
// (model/gpt.cuh).
#pragma once
#include <string>

#include "pipeline/schedule.h"

// Throws std::runtime_error with one line naming the schedule (`name`, as the user gave it) when
// it has an overlapped pair and tp > 1.
void check_schedule_runs_tensor_parallel(const PipelineSchedule& schedule, int tp, const std::string& name);
