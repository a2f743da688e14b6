// Which schedules run at tp > 1 (issue 33): the split backward (I and W, the zero-bubble
// schedules) and the overlapped pairs (DualPipeV) do not yet: model/gpt.cuh refuses the split
// backward's buffers at tp > 1, and a pair's backward would issue the tp group's collectives on a
// second compute stream, beside the forward's.
#pragma once
#include <string>

#include "pipeline/schedule.h"

// Throws std::runtime_error with one line naming the schedule (`name`, as the user gave it) when
// it has an I or W step or an overlapped pair and tp > 1.
void check_schedule_runs_tensor_parallel(const PipelineSchedule& schedule, int tp, const std::string& name);
