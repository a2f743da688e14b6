// Which schedules run at tp > 1 (pipeline/tensor_parallel_schedule.h).
#include "pipeline/tensor_parallel_schedule.h"

#include <stdexcept>

void check_schedule_runs_tensor_parallel(const PipelineSchedule& schedule, int tp, const std::string& name) {
  if (tp == 1) return;
  for (const StageSchedule& stage : schedule.stages)
    for (const Step& step : stage)
      for (const Action& a : step)
        if (a.overlapped)
          throw std::runtime_error(name + " overlaps a forward with a backward: not with --tp " + std::to_string(tp) +
                                   " yet (issue 33)");
}
